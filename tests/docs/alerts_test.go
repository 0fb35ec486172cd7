package docs

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type alertRule struct {
	Alert  string            `yaml:"alert"`
	For    string            `yaml:"for"`
	Labels map[string]string `yaml:"labels"`
}

func alertRules(t *testing.T) []alertRule {
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "alerts/diskprobe.rules.yml")), &file); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

var severityWord = regexp.MustCompile(`[a-z]+`)

// TestAlertTableIsTheRules: every alert of alerts/diskprobe.rules.yml has a row in
// docs/alerts.md and every row names an alert of the file; a row's severities are its rules'
// and its text gives each rule's `for` ("> 30 s" for an alert that needs "> 30 s for 1m" is
// how the table once misled).
func TestAlertTableIsTheRules(t *testing.T) {
	doc := read(t, "docs/alerts.md")
	rows := tableRows(section(t, doc, "docs/alerts.md", "# Alerts and dashboards"))
	rules := alertRules(t)
	rowOf := map[string][]string{}
	for _, r := range rows {
		if len(r) != 3 {
			t.Fatalf("docs/alerts.md: row %q is not | alert | severity | fires when |", r)
		}
		for _, name := range codeSpans(r[0]) {
			rowOf[name] = r
		}
	}
	inRules := map[string]bool{}
	for _, rule := range rules {
		inRules[rule.Alert] = true
		row, ok := rowOf[rule.Alert]
		if !ok {
			t.Errorf("alert %s is not in docs/alerts.md's table", rule.Alert)
			continue
		}
		if sev := rule.Labels["severity"]; !slices.Contains(severityWord.FindAllString(row[1], -1), sev) {
			t.Errorf("docs/alerts.md: %s has severity %q, the rule %q", rule.Alert, row[1], sev)
		}
		if rule.For != "" && !regexp.MustCompile(`\bfor `+regexp.QuoteMeta(rule.For)+`\b`).MatchString(row[2]) {
			t.Errorf("docs/alerts.md: %s fires %q; the rule holds for %s (say \"for %s\")", rule.Alert, row[2], rule.For, rule.For)
		}
	}
	for name, row := range rowOf {
		if !inRules[name] {
			t.Errorf("docs/alerts.md names alert %s, which alerts/diskprobe.rules.yml does not have", name)
		}
		for _, sev := range severityWord.FindAllString(row[1], -1) {
			found := false
			for _, rule := range rules {
				found = found || (rule.Alert == name && rule.Labels["severity"] == sev)
			}
			if !found && strings.Contains(row[0], "`"+name+"`") && len(codeSpans(row[0])) == 1 {
				t.Errorf("docs/alerts.md: %s is documented with severity %s, which none of its rules has", name, sev)
			}
		}
	}
}
