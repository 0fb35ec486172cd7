// Package mixin tests mixin/mixin.libsonnet: its output must be the shipped rules and
// dashboards, and its _config must reach every rule it says it does.
package mixin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-jsonnet"
	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

type output struct {
	Alerts     ruleFile                  `json:"alerts"`
	Rules      ruleFile                  `json:"rules"`
	Dashboards map[string]map[string]any `json:"dashboards"`
}

type ruleFile struct {
	Groups []map[string]any `json:"groups" yaml:"groups"`
}

// evaluate runs the mixin with a _config override (jsonnet object) through go-jsonnet.
func evaluate(t *testing.T, config string) output {
	t.Helper()
	vm := jsonnet.MakeVM()
	// mixin/ is where the snippet's import is found; mixin.libsonnet's own imports are
	// relative to it.
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{testenv.RepoPath("mixin")}})
	src := `local m = (import 'mixin.libsonnet') + { _config+:: ` + config + ` };
{ alerts: m.prometheusAlerts, rules: m.prometheusRules, dashboards: m.grafanaDashboards }`
	js, err := vm.EvaluateAnonymousSnippet("test.jsonnet", src)
	if err != nil {
		t.Fatal(err)
	}
	var out output
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// asJSON round-trips v through JSON, so that YAML- and JSON-decoded values compare alike.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMixinIsTheShippedRulesAndDashboards(t *testing.T) {
	out := evaluate(t, "{}")
	data, err := os.ReadFile(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var file ruleFile
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	// The groups are kept whole: alerting groups in prometheusAlerts, recording ones in
	// prometheusRules, each in the file's order.
	var got []map[string]any
	alertGroups := map[any]bool{}
	for _, g := range out.Alerts.Groups {
		alertGroups[g["name"]] = true
	}
	ai, ri := 0, 0
	for _, g := range file.Groups {
		if alertGroups[g["name"]] {
			got = append(got, out.Alerts.Groups[ai])
			ai++
		} else {
			got = append(got, out.Rules.Groups[ri])
			ri++
		}
	}
	if ai != len(out.Alerts.Groups) || ri != len(out.Rules.Groups) {
		t.Fatalf("the mixin has %d alerting and %d recording groups; the file %d groups", len(out.Alerts.Groups), len(out.Rules.Groups), len(file.Groups))
	}
	if !reflect.DeepEqual(asJSON(t, got), asJSON(t, file.Groups)) {
		t.Error("the mixin's groups differ from alerts/diskprobe.rules.yml")
	}

	files, _ := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	if len(files) != len(out.Dashboards) {
		t.Errorf("the mixin has %d dashboards, dashboards/ %d: list every file in mixin.libsonnet", len(out.Dashboards), len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(asJSON(t, out.Dashboards[filepath.Base(f)]), want) {
			t.Errorf("the mixin's %s differs from %s", filepath.Base(f), f)
		}
	}
}

func TestMixinConfigReachesTheRules(t *testing.T) {
	const selector = `job="kube-system/diskprobe"`
	const runbook = "https://wiki.example.com/ops/diskprobe-runbook"
	out := evaluate(t, `{diskprobeSelector: '`+selector+`', alertFor: {DiskprobeExporterDown: '7m'}, alertLabels: {team: 'storage'}, peerGroupLabels: 'job, etcd_cluster, target', runbookURLBase: '`+runbook+`'}`)
	raw, _ := json.Marshal(out)
	if strings.Contains(string(raw), `job=~\".*diskprobe.*\"`) {
		t.Error("the default selector survives a _config.diskprobeSelector")
	}
	uses, peerUses := 0, 0
	for _, g := range append(out.Alerts.Groups, out.Rules.Groups...) {
		for _, r := range g["rules"].([]any) {
			rule := r.(map[string]any)
			if strings.Contains(rule["expr"].(string), selector) {
				uses++
			}
			if strings.Contains(rule["expr"].(string), "job, cluster, peer_group, target") {
				t.Errorf("rule %v%v keeps the default peer group labels", rule["record"], rule["alert"])
			}
			if strings.Contains(rule["expr"].(string), "by (job, etcd_cluster, target)") {
				peerUses++
			}
			if name, ok := rule["alert"]; ok {
				if labels, _ := rule["labels"].(map[string]any); labels["team"] != "storage" {
					t.Errorf("alert %v lacks the _config.alertLabels", name)
				}
				// The user's own runbook: every alert links there, at its own anchor.
				if annotations, _ := rule["annotations"].(map[string]any); !strings.HasPrefix(fmt.Sprint(annotations["runbook_url"]), runbook+"#") {
					t.Errorf("alert %v runbook_url %v, want the _config.runbookURLBase %s#…", name, annotations["runbook_url"], runbook)
				}
				if name == "DiskprobeExporterDown" && rule["for"] != "7m" {
					t.Errorf("DiskprobeExporterDown for %v, want the _config.alertFor 7m", rule["for"])
				}
			}
		}
	}
	if uses == 0 {
		t.Error("no rule uses the configured selector")
	}
	if peerUses == 0 {
		t.Error("no rule groups peers by the configured _config.peerGroupLabels")
	}
	dashboards, _ := json.Marshal(out.Dashboards)
	if strings.Contains(string(dashboards), "job, cluster, peer_group, target") || !strings.Contains(string(dashboards), "on (job, etcd_cluster, target)") {
		t.Error("the dashboards' peer panels do not join on the configured _config.peerGroupLabels")
	}
}

// TestMixinOutputPassesPromtool: what the mixin renders loads into Prometheus 2.42 and 3.
func TestMixinOutputPassesPromtool(t *testing.T) {
	servers := framework.PrometheusServers(t)
	out := evaluate(t, `{alertLabels: {team: 'storage'}}`)
	all := ruleFile{Groups: append(out.Rules.Groups, out.Alerts.Groups...)}
	data, err := yaml.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mixin.rules.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, srv := range servers {
		if out, err := exec.Command(srv.Promtool, "check", "rules", path).CombinedOutput(); err != nil {
			t.Errorf("promtool %s check rules: %v\n%s", srv.Name, err, out)
		}
	}
}
