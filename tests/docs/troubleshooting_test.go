package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// goSource is the text of the daemon's Go files (not tests), string literals that are
// concatenated across lines ("a " +\n "b") joined, so that a message reads as it prints.
func goSource(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(testenv.RepoPath(), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "tests" || d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`"\s*\+\s*"`).ReplaceAllString(b.String(), "")
}

// placeholder is what a document writes for the varying part of a message: <dir>, <user>.
var placeholder = regexp.MustCompile(`<[^<>\s]+>`)

// TestTroubleshootingQuotesTheCodesMessages: every message docs/troubleshooting.md quotes
// (its text blocks, and its code spans of eight words or more) is one the code writes: each
// piece between the <placeholders> is in a string of the daemon's source. A message
// reworded in the code fails here until the page says what a user will now see.
func TestTroubleshootingQuotesTheCodesMessages(t *testing.T) {
	doc := read(t, "docs/troubleshooting.md")
	src := goSource(t)
	var quotes []string
	for _, b := range codeBlocks(doc, "text") {
		quotes = append(quotes, strings.Split(strings.TrimSpace(b), "\n")...)
	}
	for _, s := range codeSpans(doc) {
		if len(strings.Fields(s)) >= 8 && !strings.Contains(s, "kubectl") && !strings.Contains(s, "--set") {
			quotes = append(quotes, s)
		}
	}
	if len(quotes) < 8 {
		t.Fatalf("docs/troubleshooting.md quotes %d messages; the test expects the page's", len(quotes))
	}
	for _, q := range quotes {
		for _, piece := range placeholder.Split(q, -1) {
			piece = strings.Join(strings.Fields(piece), " ") // as the page wraps it
			if len(piece) < 4 {
				continue
			}
			// Quoted as Go writes it in a string literal.
			lit := strings.ReplaceAll(piece, `"`, `\"`)
			if !strings.Contains(src, piece) && !strings.Contains(src, lit) {
				t.Errorf("docs/troubleshooting.md quotes %q; the code writes no %q", q, piece)
			}
		}
	}
}

// TestTroubleshootingNamesRealAlertsAndFlags: every alert docs/troubleshooting.md names is a
// rule of alerts/diskprobe.rules.yml, every diskprobe_exporter flag it uses is in --help,
// and the README links to the page.
func TestTroubleshootingNamesRealAlertsAndFlags(t *testing.T) {
	doc := read(t, "docs/troubleshooting.md")
	rules := read(t, "alerts/diskprobe.rules.yml")
	names := regexp.MustCompile(`\bDiskprobe[A-Z][A-Za-z]+\b`).FindAllString(doc, -1)
	if len(names) == 0 {
		t.Fatal("docs/troubleshooting.md names no alert")
	}
	for _, n := range names {
		if !strings.Contains(rules, "alert: "+n+"\n") {
			t.Errorf("docs/troubleshooting.md names %s, which is no alert of alerts/diskprobe.rules.yml", n)
		}
	}
	helpOf := helpReader(t)
	all := helpOf("serve") + helpOf("check") + helpOf("cleanup")
	for _, m := range regexp.MustCompile("`(--[a-z][a-z0-9.-]*)`").FindAllStringSubmatch(doc, -1) {
		if !helpLists(all, m[1]) {
			t.Errorf("docs/troubleshooting.md quotes %s, which no diskprobe_exporter command's --help lists", m[1])
		}
	}
	for _, l := range commandLines(doc, "diskprobe_exporter") {
		for _, m := range flagRE.FindAllStringSubmatch(l, -1) {
			flag, _, _ := strings.Cut(m[1], "=")
			if !helpLists(all, flag) {
				t.Errorf("docs/troubleshooting.md: `%s` uses %s, which --help does not list", l, flag)
			}
		}
	}
	for _, doc := range []string{"README.md", "docs/install.md", "docs/kubernetes.md"} {
		if !strings.Contains(read(t, doc), "troubleshooting.md") {
			t.Errorf("%s does not link to docs/troubleshooting.md", doc)
		}
	}
}
