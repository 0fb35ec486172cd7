// Package alerts tests the Prometheus recording and alerting rules of diskprobe_exporter
// (alerts/diskprobe.rules.yml at the top of the repository) and their promtool unit tests
// (alerts/tests/). It runs promtool, checks that every rule and dashboard query names only
// metrics the exporter really registers, and runs the rules and dashboards against a real
// Prometheus scraping the real exporter.
package alerts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ruleFiles are the rule files shipped in alerts/ (test files excluded).
func ruleFiles(t *testing.T) []string {
	t.Helper()
	// Every *.yml here, as a user's `rule_files: [alerts/*.yml]` takes them: a promtool test
	// file among them makes Prometheus exit ("field rule_files not found"), so those live in
	// alerts/tests/ and promtool check rules fails on any that comes back.
	files, err := filepath.Glob(testenv.RepoPath("alerts", "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.yml in alerts/ (%v)", err)
	}
	return files
}

func loadRules(t *testing.T, path string) ruleFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// allRules is every rule of every rule file.
func allRules(t *testing.T) []rule {
	t.Helper()
	var rules []rule
	for _, path := range ruleFiles(t) {
		for _, g := range loadRules(t, path).Groups {
			rules = append(rules, g.Rules...)
		}
	}
	return rules
}

// query is one PromQL expression found in a dashboard, and where.
type query struct {
	Where string // "diskprobe-fleet.json: panel \"...\" A"
	Expr  string // as written, with Grafana variables
}

// dashboardQueries extracts every PromQL expression of every dashboard: the panels'
// targets (rows' nested panels included), the annotations' queries, and the query variables,
// whose label_values(...) and query_result(...) wrappers are Grafana's, not PromQL; the
// selector or query inside is.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	dashboardDir := testenv.RepoPath("dashboards")
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboardDir, err)
	}
	var out []query
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels      []panel `json:"panels"`
			Annotations struct {
				List []struct {
					Name string `json:"name"`
					Expr string `json:"expr"`
				} `json:"list"`
			} `json:"annotations"`
			Templating struct {
				List []struct {
					Name  string          `json:"name"`
					Type  string          `json:"type"`
					Query json.RawMessage `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Base(path)
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) != "" {
						out = append(out, query{fmt.Sprintf("%s: panel %q %s", name, p.Title, tg.RefID), tg.Expr})
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, a := range d.Annotations.List {
			if strings.TrimSpace(a.Expr) != "" {
				out = append(out, query{fmt.Sprintf("%s: annotation %q", name, a.Name), a.Expr})
			}
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q := variableQuery(v.Query)
			if expr, ok := grafanaFunctionArg(q); ok {
				out = append(out, query{fmt.Sprintf("%s: variable %s", name, v.Name), expr})
			} else if q != "" {
				t.Errorf("%s: variable %s: query %q is neither label_values(selector, label) nor query_result(expr)", name, v.Name, q)
			}
		}
	}
	return out
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// variableQuery reads a query variable's query, a string in old dashboards and an
// object {"query": "...", "refId": ...} since Grafana 10.
func variableQuery(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "" // not a target with a query: nothing to check
	}
	return o.Query
}

var (
	labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResultRe = regexp.MustCompile(`^\s*query_result\(\s*(.+)\s*\)\s*$`)
)

// grafanaFunctionArg returns the PromQL inside a Prometheus template variable query.
func grafanaFunctionArg(q string) (string, bool) {
	if m := labelValuesRe.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	if m := queryResultRe.FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	return "", false
}

var grafanaVarRe = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// expandGrafana replaces Grafana's variables so that Prometheus can run the query:
// $__rate_interval and friends by a range, dashboard variables (only ever used in =~
// matchers) by the regex value, which ".*" makes "all of them".
func expandGrafana(expr, rangeValue, variableValue string) string {
	return grafanaVarRe.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVarRe.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		switch name {
		case "__rate_interval", "__interval", "__range", "__range_s", "__interval_ms", "__range_ms":
			return rangeValue
		case "datasource":
			return ""
		default:
			return variableValue
		}
	})
}

// recordedNames is the set of series names the recording rules produce.
func recordedNames(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, r := range allRules(t) {
		if r.Record != "" {
			names[r.Record] = true
		}
	}
	return names
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
