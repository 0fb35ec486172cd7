package docs

import (
	"regexp"
	"strings"
	"testing"
)

// TestCheckFlagTablesAreTheBinarys: docs/check.md's flag tables and `check --help` list
// the same flags. A flag added to the command without a row (or a row for a flag that
// was renamed) sends a user to options that are not there.
func TestCheckFlagTablesAreTheBinarys(t *testing.T) {
	help := helpReader(t)("check")
	doc := read(t, "docs/check.md")
	documented := map[string]bool{}
	// A table row whose first cell is one flag: "| `--load-bandwidth` | ..." or "| `--[no-]progress` |".
	for _, m := range regexp.MustCompile("(?m)^\\| `(--(?:\\[no-\\])?[a-z][a-z0-9-]*)` \\|").FindAllStringSubmatch(doc, -1) {
		flag := strings.Replace(m[1], "--[no-]", "--", 1)
		documented[flag] = true
		if !helpLists(help, flag) {
			t.Errorf("docs/check.md has a row for %s, which `check --help` does not list", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+--(?:\[no-\])?([a-z][a-z0-9.-]*)`).FindAllStringSubmatch(help, -1) {
		flag := "--" + m[1]
		if flag == "--help" || flag == "--help-long" || flag == "--help-man" || flag == "--version" {
			continue
		}
		// --profile has the profiles' table, whose rows are its values.
		if !documented[flag] && !globalFlag(flag) && flag != "--profile" {
			t.Errorf("`check --help` lists %s, which no row of docs/check.md's flag tables documents", flag)
		}
	}
	if !documented["--load"] {
		t.Error("the test found no row for --load: the table format changed under it")
	}
}

// globalFlag: the flags every command takes (logging, procfs paths), documented in
// docs/configuration.md rather than check.md.
func globalFlag(flag string) bool {
	return strings.HasPrefix(flag, "--log.") || strings.HasPrefix(flag, "--path.") || strings.HasPrefix(flag, "--web.") || strings.HasPrefix(flag, "--config.")
}
