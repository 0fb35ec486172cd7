package docs

import (
	"regexp"
	"strings"
	"testing"
)

// runbookCommands: each alert's section gives the first command to run on a host with the
// package (systemctl or journalctl) and on Kubernetes (kubectl).
var runbookCommands = []struct {
	what string
	re   *regexp.Regexp
}{
	{"systemd (systemctl or journalctl)", regexp.MustCompile(`\b(systemctl|journalctl) `)},
	{"Kubernetes (kubectl)", regexp.MustCompile(`\bkubectl `)},
}

var alertName = regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)

// TestRunbookSectionLacksHostOrKubernetesSteps fails when an alert of
// alerts/diskprobe.rules.yml has no section in docs/runbook.md, or a section without a
// systemd command or a kubectl command: the on-call of a host or of a cluster would have
// nothing to start from.
func TestRunbookSectionLacksHostOrKubernetesSteps(t *testing.T) {
	rules := read(t, "alerts/diskprobe.rules.yml")
	runbook := read(t, "docs/runbook.md")
	// The level-2 sections by their exact heading (section matches a heading's prefix).
	sections := map[string]string{}
	for _, part := range strings.Split(runbook, "\n## ")[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		sections[strings.TrimSpace(heading)] = body
	}
	seen := map[string]bool{}
	for _, m := range alertName.FindAllStringSubmatch(rules, -1) {
		alert := m[1]
		if seen[alert] {
			continue
		}
		seen[alert] = true
		text, ok := sections[alert]
		if !ok {
			t.Errorf("%s: docs/runbook.md has no section \"## %s\"", alert, alert)
			continue
		}
		for _, c := range runbookCommands {
			if !c.re.MatchString(text) {
				t.Errorf("%s: its runbook section has no %s command", alert, c.what)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no alerts found in alerts/diskprobe.rules.yml")
	}
}
