package docs

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDocsNameOnlyLabelsAMetricHas: "diskprobe_probe_errors_total by `reason`" sent users to
// a label the metric does not have.
func TestDocsNameOnlyLabelsAMetricHas(t *testing.T) {
	metrics := documentedMetrics(t)
	re := regexp.MustCompile("`(diskprobe_[a-z_]+)`\\s+by\\s+`([a-z_]+)`")
	for name, doc := range documents(t) {
		for _, m := range re.FindAllStringSubmatch(doc, -1) {
			d, ok := metrics[m[1]]
			if !ok {
				continue
			}
			if !slices.Contains(d.labels, m[2]) {
				t.Errorf("%s: %s by `%s`: its labels are %v", name, m[1], m[2], d.labels)
			}
		}
	}
}

// TestDocsSayWhichRulesSelectTheJob: "every rule selects job=~…diskprobe…" sent users
// looking for a selector in rules that have none; only the exporter-health alerts do.
func TestDocsSayWhichRulesSelectTheJob(t *testing.T) {
	var file struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "alerts/diskprobe.rules.yml")), &file); err != nil {
		t.Fatal(err)
	}
	all := true
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			all = all && strings.Contains(r.Expr, `job=~".*diskprobe.*"`)
		}
	}
	if all {
		return
	}
	for name, doc := range documents(t) {
		flat := strings.Join(strings.Fields(doc), " ")
		if m := regexp.MustCompile(`(?i)(every|all) (the )?rules? selects? .{0,10}job=~`).FindString(flat); m != "" {
			t.Errorf("%s: %q; only some rules select the job", name, m)
		}
	}
}
