// Command benchmarks keeps the benchmark report in docs/benchmarks/, one file per section,
// and BENCHMARKS.md at the top a short index of them, so that make bench rewrites files
// under docs/benchmarks/ rather than one 118 KB file at the root of the repository.
//
// The report's writers (tests/bench, tests/internal/alertreplay, tests/e2e's bench mode,
// tests/sharding) rewrite sections of one whole file, by heading, as they always did; make
// bench hands them one made by join and splits it again afterwards:
//
//	go -C tests run ./cmd/benchmarks join  >FULL   # the whole report, from the repository
//	go -C tests run ./cmd/benchmarks split FULL    # FULL into docs/benchmarks/ and BENCHMARKS.md
//
// split is also how a BENCHMARKS.md in the old form (one file, every section in it) is
// brought into this one: `go -C tests run ./cmd/benchmarks split $PWD/BENCHMARKS.md`. It
// writes each "## " section into docs/benchmarks/<its anchor>.md unchanged but for its
// links (a relative link gains ../../, a link to a heading of another section names that
// section's file), writes BENCHMARKS.md as the report's preamble and a list of the
// sections, and points the links of README.md and docs/*.md into BENCHMARKS.md#<anchor>
// (relative, or into the repository's main branch) at the section's file. join undoes
// the first two exactly.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

const (
	// repoBlob is how the packaged documents link into the repository (tests/docs).
	repoBlob = "https://github.com/diskprobe/diskprobe_exporter/blob/main/"
	dir      = "docs/benchmarks"
	marker   = "<!-- sections: go -C tests run ./cmd/benchmarks join rebuilds the whole report -->"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	switch {
	case len(args) == 1 && args[0] == "join":
		out, err := join(root)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(out)
		return err
	case len(args) == 2 && args[0] == "split":
		data, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		return split(root, data)
	}
	return fmt.Errorf("usage: benchmarks join >FULL | benchmarks split FULL")
}

// repoRoot is the directory above tests/, where go -C tests runs this.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "BENCHMARKS.md")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no BENCHMARKS.md above %s", wd)
}

type section struct {
	slug string // its file's name without .md: the anchor of its heading
	text string // from its "## " line to the next one
}

// parts cuts a whole report into its preamble and its "## " sections (outside code blocks).
func parts(doc string) (string, []section) {
	lines := strings.SplitAfter(doc, "\n")
	var pre strings.Builder
	var secs []section
	inCode := false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(l, "## ") {
			secs = append(secs, section{slug: anchor(strings.TrimSpace(l[3:]))})
		}
		if len(secs) == 0 {
			pre.WriteString(l)
		} else {
			secs[len(secs)-1].text += l
		}
	}
	return pre.String(), secs
}

// anchor is GitHub's anchor of a heading's text.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '—' && r != '’' && r != '…':
			b.WriteRune(r)
		}
	}
	return b.String()
}

var htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)

// headingAnchors are the anchors of text outside code blocks: its headings' and its
// <a id> tags' (the report's short names: #fsync, #scrape, #alert-replay).
func headingAnchors(text string) []string {
	var out []string
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		if strings.HasPrefix(l, "#") {
			out = append(out, anchor(strings.TrimSpace(strings.TrimLeft(l, "#"))))
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func split(root string, data []byte) error {
	pre, secs := parts(string(data))
	if len(secs) == 0 {
		return fmt.Errorf("no \"## \" section in the report")
	}
	if i := strings.Index(pre, marker); i >= 0 {
		return fmt.Errorf("that is the index, not a whole report: join first")
	}
	where := map[string]string{} // anchor -> the section file holding it
	for _, s := range secs {
		for _, a := range headingAnchors(s.text) {
			if w, dup := where[a]; dup && w != s.slug+".md" {
				return fmt.Errorf("the anchor #%s is in %s and %s.md: a link to it would change its target", a, w, s.slug)
			}
			where[a] = s.slug + ".md"
		}
	}
	if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(root, dir, "*.md"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	var index strings.Builder
	if !strings.HasSuffix(pre, "\n\n") {
		return fmt.Errorf("the preamble does not end in a blank line")
	}
	index.WriteString(pre)
	index.WriteString("The report is one file per section under [docs/benchmarks/](docs/benchmarks/), which `make bench`\n" +
		"rewrites; this page only lists them.\n\n" + marker + "\n\n")
	for _, s := range secs {
		text := link.ReplaceAllStringFunc(s.text, func(m string) string {
			target := m[2 : len(m)-1]
			switch {
			case strings.HasPrefix(target, "#"):
				if f := where[target[1:]]; f != "" && f != s.slug+".md" {
					return "](" + f + target + ")"
				}
				return m
			case strings.Contains(target, "://") || strings.HasPrefix(target, "/") || strings.HasPrefix(target, "mailto:"):
				return m
			}
			return "](../../" + target + ")"
		})
		if err := os.WriteFile(filepath.Join(root, dir, s.slug+".md"), []byte(text), 0o644); err != nil {
			return err
		}
		title := strings.TrimSpace(strings.SplitN(s.text, "\n", 2)[0][3:])
		fmt.Fprintf(&index, "- [%s](%s/%s.md)\n", title, dir, s.slug)
	}
	if err := os.WriteFile(filepath.Join(root, "BENCHMARKS.md"), []byte(index.String()), 0o644); err != nil {
		return err
	}
	return relink(root, where)
}

// relink points the links of README.md and docs/*.md into BENCHMARKS.md#<anchor> at the
// section file that holds the heading.
func relink(root string, where map[string]string) error {
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(f), filepath.Join(root, "BENCHMARKS.md"))
		toDir, _ := filepath.Rel(filepath.Dir(f), filepath.Join(root, dir))
		var missing []string
		out := link.ReplaceAllFunc(data, func(m []byte) []byte {
			target := string(m[2 : len(m)-1])
			file, a, ok := strings.Cut(target, "#")
			var to string
			switch {
			case !ok:
				return m
			case file == rel:
				to = filepath.ToSlash(filepath.Join(toDir, where[a]))
			case file == repoBlob+"BENCHMARKS.md":
				to = repoBlob + dir + "/" + where[a]
			default:
				return m
			}
			if where[a] == "" {
				missing = append(missing, target)
				return m
			}
			return []byte("](" + to + "#" + a + ")")
		})
		if len(missing) > 0 {
			return fmt.Errorf("%s links to %v, headings the report does not have", f, missing)
		}
		if !bytes.Equal(out, data) {
			if err := os.WriteFile(f, out, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

var indexEntry = regexp.MustCompile(`(?m)^- \[[^\]]*\]\(` + regexp.QuoteMeta(dir) + `/([^)]+)\.md\)$`)

func join(root string) ([]byte, error) {
	index, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		return nil, err
	}
	head, list, ok := strings.Cut(string(index), marker)
	if !ok {
		return index, nil // a whole report already, in the old form
	}
	// The preamble is the index's text before the two lines split added.
	added := "The report is one file per section under [docs/benchmarks/](docs/benchmarks/), which `make bench`\n" +
		"rewrites; this page only lists them.\n\n"
	pre := strings.TrimSuffix(head, added)
	var out strings.Builder
	out.WriteString(pre)
	files := map[string]bool{}
	entries := indexEntry.FindAllStringSubmatch(list, -1)
	for _, e := range entries {
		files[e[1]+".md"] = true
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(root, dir, e[1]+".md"))
		if err != nil {
			return nil, err
		}
		text := link.ReplaceAllStringFunc(string(data), func(m string) string {
			target := m[2 : len(m)-1]
			if r, ok := strings.CutPrefix(target, "../../"); ok {
				return "](" + r + ")"
			}
			if file, a, ok := strings.Cut(target, "#"); ok && files[file] {
				return "](#" + a + ")"
			}
			return m
		})
		out.WriteString(text)
	}
	return []byte(out.String()), nil
}
