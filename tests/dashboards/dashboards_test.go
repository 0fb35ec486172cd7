// Package dashboards tests the Grafana dashboards of diskprobe_exporter (dashboards/*.json at
// the top of the repository, importable into Grafana 10 and later): it holds them to what
// makes a dashboard importable and readable; tests/alerts parses their queries and runs them
// against a real Prometheus.
package dashboards

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func load(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards (*.json) in dashboards/")
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func TestDashboardsAreTheTwoTheREADMEPromises(t *testing.T) {
	ds := load(t)
	for _, want := range []string{"diskprobe-fleet.json", "diskprobe-target.json"} {
		if _, ok := ds[want]; !ok {
			t.Errorf("dashboards/%s is missing", want)
		}
	}
	uids := map[string]string{}
	for f, d := range ds {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: needs a uid and a title (links between the dashboards use the uid)", f)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s and %s share uid %q", f, other, d.UID)
		}
		uids[d.UID] = f
		if d.SchemaVersion < 36 {
			t.Errorf("%s: schemaVersion %d predates Grafana 10's datasource references", f, d.SchemaVersion)
		}
	}
}

// TestDashboardsAskForDatasourceJobInstanceTarget: importable anywhere, with the data source
// chosen by the user and the fleet narrowed by cluster (a Prometheus or Thanos over many
// clusters; "All", the regex .*, where series have no cluster label), job, instance and target.
func TestDashboardsAskForDatasourceJobInstanceTarget(t *testing.T) {
	for f, d := range load(t) {
		vars := map[string]variable{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v
		}
		ds, ok := vars["datasource"]
		if !ok || ds.Type != "datasource" || strings.Trim(string(ds.Query), `"`) != "prometheus" {
			t.Errorf("%s: needs a variable datasource of type datasource querying prometheus", f)
		}
		for _, name := range []string{"cluster", "job", "instance", "target"} {
			v, ok := vars[name]
			if !ok || v.Type != "query" {
				t.Errorf("%s: needs a query variable %s", f, name)
				continue
			}
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("%s: variable %s must query ${datasource}", f, name)
			}
		}
	}
}

var (
	rangeRe = regexp.MustCompile(`\[([^\]]+)\]`)
	// A dashboard variable in an equality matcher breaks as soon as "All" or two values are
	// selected; they must be used with =~.
	eqVarRe = regexp.MustCompile(`[a-zA-Z_]\w*\s*(=|!=)\s*"[^"]*\$`)
	// Every diskprobe metric has a target label except the exporter-wide ones.
	perTargetRe = regexp.MustCompile(`diskprobe_(fdatasync|write|read|sequential|probe|device|target)_`)
)

// TestPanelsAreDescribedUnitedAndUseRateInterval: every panel says what it shows and in
// which unit, queries the chosen data source, and takes rates over $__rate_interval so that
// it works at any scrape interval and zoom.
func TestPanelsAreDescribedUnitedAndUseRateInterval(t *testing.T) {
	for f, d := range load(t) {
		ids := map[int]bool{}
		for _, p := range d.allPanels() {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", f, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: panel %q does not fit the 24-column grid: %+v", f, p.Title, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			if strings.TrimSpace(p.Description) == "" {
				t.Errorf("%s: panel %q has no description", f, p.Title)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: panel %q has no unit", f, p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q does not use the ${datasource} variable", f, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: panel %q query %s does not use ${datasource}", f, p.Title, tg.RefID)
				}
				for _, m := range rangeRe.FindAllStringSubmatch(tg.Expr, -1) {
					if m[1] != "$__rate_interval" {
						t.Errorf("%s: panel %q query %s: range [%s], want [$__rate_interval]", f, p.Title, tg.RefID, m[1])
					}
				}
				if eqVarRe.MatchString(tg.Expr) {
					t.Errorf("%s: panel %q query %s matches a variable with = instead of =~: %s", f, p.Title, tg.RefID, tg.Expr)
				}
				// Each selector narrowed by job is narrowed by cluster with it.
				if n, c := strings.Count(tg.Expr, `job=~"$job"`), strings.Count(tg.Expr, `cluster=~"$cluster", job=~"$job"`); n != c {
					t.Errorf("%s: panel %q query %s: %d of %d job selectors ignore $cluster: %s", f, p.Title, tg.RefID, n-c, n, tg.Expr)
				}
				for _, v := range []string{"$job", "$instance"} {
					if !strings.Contains(tg.Expr, v) {
						t.Errorf("%s: panel %q query %s ignores %s: %s", f, p.Title, tg.RefID, v, tg.Expr)
					}
				}
				if perTargetRe.MatchString(tg.Expr) && !strings.Contains(tg.Expr, "$target") {
					t.Errorf("%s: panel %q query %s ignores $target: %s", f, p.Title, tg.RefID, tg.Expr)
				}
			}
		}
		if !overlapFree(d.allPanels()) {
			t.Errorf("%s: panels overlap on the grid", f)
		}
	}
}

func overlapFree(ps []panel) bool {
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				return false
			}
		}
	}
	return true
}

// TestEtcdThresholdsAreOnTheLatencyPanels: the fdatasync and write percentiles are read
// against etcd's 10 ms and 25 ms targets, so those lines must be drawn.
func TestEtcdThresholdsAreOnTheLatencyPanels(t *testing.T) {
	data, err := os.ReadFile(testenv.RepoPath("dashboards", "diskprobe-target.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Custom struct {
						ThresholdsStyle struct {
							Mode string `json:"mode"`
						} `json:"thresholdsStyle"`
					} `json:"custom"`
					Thresholds struct {
						Steps []struct {
							Value *float64 `json:"value"`
						} `json:"steps"`
					} `json:"thresholds"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fdatasync latency percentiles", "write() mean latency"} {
		found := false
		for _, p := range d.Panels {
			if p.Title != want {
				continue
			}
			found = true
			steps := map[float64]bool{}
			for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
				if s.Value != nil {
					steps[*s.Value] = true
				}
			}
			if !steps[0.01] || !steps[0.025] || !strings.Contains(p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode, "line") {
				t.Errorf("panel %q: want threshold lines at 0.01 and 0.025 s, got %v (style %q)", want, steps, p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode)
			}
		}
		if !found {
			t.Errorf("diskprobe-target.json: no panel %q", want)
		}
	}
}
