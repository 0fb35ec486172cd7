// Package docs holds the tests that keep README.md and docs/*.md (at the top of the
// repository) true to the code: every
// configuration key and default, every metric, every alert, every flag and make target the
// documents name.
package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// read is a file of the repository, relative to its root.
func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section is the text under the heading that starts with heading (e.g. "### Every key"), up
// to the next heading of the same or a higher level.
func section(t *testing.T, doc, name, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, heading) {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if n := headingLevel(l); n > 0 && n <= level {
				break
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	t.Fatalf("%s has no heading %q", name, heading)
	return ""
}

func headingLevel(line string) int {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n >= len(line) || line[n] != ' ' {
		return 0
	}
	return n
}

// tableRows are the data rows of the first Markdown table in text, as their cells.
func tableRows(text string) [][]string {
	var rows [][]string
	inTable := false
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		if !inTable { // the header row
			inTable = true
			continue
		}
		if strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codeSpans are the `quoted` strings of text, outside its fenced code blocks.
func codeSpans(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(prose(text), -1) {
		out = append(out, m[1])
	}
	return out
}

// codeBlocks are the contents of the fenced code blocks of doc whose info string is one of
// langs ("" for none).
func codeBlocks(doc string, langs ...string) []string {
	var out []string
	var cur []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.HasPrefix(l, "```"):
			lang := strings.TrimPrefix(l, "```")
			in = true
			cur = nil
			for _, want := range langs {
				if lang == want {
					cur = []string{}
				}
			}
		case in && strings.HasPrefix(l, "```"):
			in = false
			if cur != nil {
				out = append(out, strings.Join(cur, "\n"))
			}
		case in && cur != nil:
			cur = append(cur, l)
		}
	}
	return out
}

// prose is doc without its fenced code blocks.
func prose(doc string) string {
	var out []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
