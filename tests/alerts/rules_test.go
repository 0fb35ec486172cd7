package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The rules and their unit tests run on each Prometheus the project supports: Debian's
// 2.42 and Prometheus 3 (framework.PrometheusServers), whose PromQL and rule loading differ.

func TestRulesPassPromtoolCheck(t *testing.T) {
	for _, srv := range framework.PrometheusServers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			out, err := exec.Command(srv.Promtool, append([]string{"check", "rules"}, ruleFiles(t)...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s check rules: %v\n%s", srv.Name, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

func TestRulesPassPromtoolUnitTests(t *testing.T) {
	tests, err := filepath.Glob(testenv.RepoPath("alerts", "tests", "*.yml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool unit test files in alerts/tests/")
	}
	for _, srv := range framework.PrometheusServers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			out, err := exec.Command(srv.Promtool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s test rules: %v\n%s", srv.Name, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

const runbookBase = "https://github.com/diskprobe/diskprobe_exporter/blob/main/docs/runbook.md#"

// TestEveryAlertIsRoutableAndDocumented holds each alert to what an on-call engineer needs:
// a severity Alertmanager can route on, a summary, a description that says what to do, and
// a runbook link whose anchor exists in docs/runbook.md.
func TestEveryAlertIsRoutableAndDocumented(t *testing.T) {
	runbook, err := os.ReadFile(testenv.RepoPath("docs", "runbook.md"))
	if err != nil {
		t.Fatalf("the runbook the alerts link to: %v", err)
	}
	anchors := markdownAnchors(string(runbook))
	n := 0
	for _, r := range allRules(t) {
		if r.Alert == "" {
			continue
		}
		n++
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		if !ok {
			t.Errorf("%s: runbook_url %q does not point into %s", r.Alert, url, runbookBase)
			continue
		}
		if anchor != strings.ToLower(r.Alert) {
			t.Errorf("%s: runbook anchor %q, want the alert's own section %q", r.Alert, anchor, strings.ToLower(r.Alert))
		}
		if !anchors[anchor] {
			t.Errorf("%s: docs/runbook.md has no section with anchor #%s", r.Alert, anchor)
		}
	}
	if n == 0 {
		t.Fatal("no alerting rules found")
	}
}

// markdownAnchors computes the anchors GitHub gives the headings of a markdown file.
func markdownAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = strings.ToLower(drop.ReplaceAllString(h, ""))
		anchors[strings.ReplaceAll(h, " ", "-")] = true
	}
	return anchors
}

// TestEveryAlertHasAUnitTestThatFiresIt makes sure no alert ships untested: each one is
// expected to fire in at least one promtool alert_rule_test.
func TestEveryAlertHasAUnitTestThatFiresIt(t *testing.T) {
	tests, _ := filepath.Glob(testenv.RepoPath("alerts", "tests", "*.yml"))
	fired := map[string]bool{}
	quiet := map[string]bool{}
	for _, path := range tests {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string `yaml:"alertname"`
					ExpAlerts []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, tg := range f.Tests {
			for _, c := range tg.AlertRuleTest {
				if len(c.ExpAlerts) > 0 {
					fired[c.Alertname] = true
				} else {
					quiet[c.Alertname] = true
				}
			}
		}
	}
	for _, r := range allRules(t) {
		if r.Alert != "" && !fired[r.Alert] {
			t.Errorf("%s: no promtool test expects it to fire", r.Alert)
		}
	}
	t.Logf("alerts with an explicit quiet case: %d of %d fired", len(quiet), len(fired))
}
