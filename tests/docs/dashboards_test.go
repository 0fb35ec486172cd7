package docs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestDashboardImportIsDescribedAsTheDashboardsAreMade: the dashboards have no __inputs, so
// Grafana's import asks for no data source; each has a data source variable, where the user
// chooses it. README.md and docs/alerts.md say that (they said "pick a Prometheus data
// source" at import), and name the Grafana the dashboards are made for.
func TestDashboardImportIsDescribedAsTheDashboardsAreMade(t *testing.T) {
	files, _ := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards/*.json")
	}
	variable := ""
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Inputs     []any `json:"__inputs"`
			Templating struct {
				List []struct{ Name, Type string }
			}
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(d.Inputs) > 0 {
			t.Fatalf("%s has __inputs: the import asks for a data source, and this test's premise is gone", filepath.Base(f))
		}
		found := ""
		for _, v := range d.Templating.List {
			if v.Type == "datasource" {
				found = v.Name
			}
		}
		if found == "" || variable != "" && found != variable {
			t.Fatalf("%s: data source variable %q (others: %q)", filepath.Base(f), found, variable)
		}
		variable = found
	}
	for _, name := range []string{"README.md", "docs/alerts.md"} {
		doc := strings.Join(strings.Fields(read(t, name)), " ")
		if !strings.Contains(doc, "`"+variable+"` variable") {
			t.Errorf("%s does not say to choose the data source in the dashboards' `%s` variable", name, variable)
		}
		if strings.Contains(doc, "pick a Prometheus data source") || strings.Contains(doc, "and pick a data source") {
			t.Errorf("%s tells the user to pick a data source at import, which asks for none", name)
		}
		if !strings.Contains(doc, "Grafana 10") {
			t.Errorf("%s does not name the Grafana the dashboards are made for (10+)", name)
		}
	}
}
