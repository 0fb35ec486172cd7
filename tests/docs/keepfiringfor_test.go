package docs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
	"thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20}

// TestKeepFiringForIsCountedAsTheRulesHaveIt: the docs told users of a Prometheus before
// 2.42 to delete "those two lines" of two alerts; nine rules of seven alerts carry
// keep_firing_for, and the file was still refused.
func TestKeepFiringForIsCountedAsTheRulesHaveIt(t *testing.T) {
	var file struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "alerts/diskprobe.rules.yml")), &file); err != nil {
		t.Fatal(err)
	}
	rules, alerts := 0, map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if _, ok := r["keep_firing_for"]; ok {
				rules++
				alerts[fmt.Sprint(r["alert"])] = true
			}
		}
	}
	claim := regexp.MustCompile(`(?i)\b([\w-]+) rules of ([\w-]+) alerts\b`)
	for _, name := range []string{"docs/alerts.md", "docs/runbook.md"} {
		doc := strings.Join(strings.Fields(read(t, name)), " ")
		if regexp.MustCompile(`(?i)those two lines|two alerts (hold|keep)`).MatchString(doc) {
			t.Errorf("%s still says two alerts carry keep_firing_for; %d rules of %d alerts do", name, rules, len(alerts))
		}
		found := false
		for _, m := range claim.FindAllStringSubmatch(doc, -1) {
			r, a := numberWord(m[1]), numberWord(m[2])
			if r == 0 || a == 0 {
				continue
			}
			found = true
			if r != rules || a != len(alerts) {
				t.Errorf("%s: %q; the rules file has keep_firing_for on %d rules of %d alerts", name, m[0], rules, len(alerts))
			}
		}
		if !found {
			t.Errorf("%s does not say how many rules carry keep_firing_for (%d rules of %d alerts)", name, rules, len(alerts))
		}
	}
	runbook := section(t, read(t, "docs/runbook.md"), "docs/runbook.md", "# diskprobe_exporter runbook")
	for a := range alerts {
		if !strings.Contains(runbook, "`"+a+"`") {
			t.Errorf("docs/runbook.md's conventions do not name %s among the alerts with keep_firing_for", a)
		}
	}
	if !strings.Contains(runbook, "sed '/keep_firing_for:/d'") {
		t.Error("docs/runbook.md gives no command that removes every keep_firing_for line")
	}
}

// numberWord reads "seven" or "twenty-one" (0: not a number word).
func numberWord(w string) int {
	w = strings.ToLower(w)
	if tens, unit, ok := strings.Cut(w, "-"); ok {
		if tens != "twenty" || numberWords[unit] == 0 || numberWords[unit] > 9 {
			return 0
		}
		return 20 + numberWords[unit]
	}
	return numberWords[w]
}
