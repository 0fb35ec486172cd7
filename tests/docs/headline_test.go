package docs

import (
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestReadmeHeadlineSaysWhatPagesAndWhatOpensATicket: the alert that fires when a disk's p99
// first crosses etcd's 10 ms is routed by examples/alertmanager.yml to a ticket, not a pager;
// the README's headline said on-call "is paged when an SSD starts to degrade".
func TestReadmeHeadlineSaysWhatPagesAndWhatOpensATicket(t *testing.T) {
	var am struct {
		Route struct {
			Routes []struct {
				Matchers []string `yaml:"matchers"`
				Receiver string   `yaml:"receiver"`
			} `yaml:"routes"`
		} `yaml:"route"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "examples/alertmanager.yml")), &am); err != nil {
		t.Fatal(err)
	}
	severity := ""
	for _, r := range alertRules(t) {
		if r.Alert == "DiskprobeFdatasyncP99AboveEtcdTarget" {
			severity = r.Labels["severity"]
		}
	}
	receiver := ""
	for _, r := range am.Route.Routes {
		sev := ""
		for _, m := range r.Matchers {
			if v, ok := strings.CutPrefix(m, "severity="); ok {
				sev = strings.Trim(v, `"`)
			}
		}
		if sev == "" || sev == severity {
			receiver = r.Receiver
			break
		}
	}
	intro, _, _ := strings.Cut(read(t, "README.md"), "```")
	intro = strings.Join(strings.Fields(intro), " ")
	if receiver != "pager" {
		if regexp.MustCompile(`paged when an? (SSD|disk) starts to degrade`).MatchString(intro) {
			t.Errorf("README.md's headline says on-call is paged when a disk starts to degrade; the 10 ms alert (%s) goes to %q", severity, receiver)
		}
		if !strings.Contains(intro, "10 ms") || !strings.Contains(intro, "ticket") {
			t.Errorf("README.md's headline does not say that crossing etcd's 10 ms opens a ticket (%s, routed to %q):\n%s", severity, receiver, intro)
		}
	}
}
