package docs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// documents are the files a newcomer reads; the checks below hold for each.
func documents(t *testing.T) map[string]string {
	out := map[string]string{"README.md": read(t, "README.md")}
	files, err := filepath.Glob(testenv.RepoPath("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		out["docs/"+filepath.Base(f)] = read(t, "docs/"+filepath.Base(f))
	}
	return out
}

// commandLines are the lines of doc's shell and plain code blocks and its code spans that
// hold a command starting with prefix, from prefix on.
func commandLines(doc, prefix string) []string {
	var texts []string
	for _, b := range codeBlocks(doc, "", "sh") {
		texts = append(texts, strings.Split(b, "\n")...)
	}
	texts = append(texts, codeSpans(doc)...)
	return matchCommands(texts, prefix)
}

// transcriptCommands are the commands of doc's console blocks (a session shown with its
// output: the lines after "$ "), from prefix on. They are shown, not run.
func transcriptCommands(doc, prefix string) []string {
	var texts []string
	for _, b := range codeBlocks(doc, "console") {
		for _, l := range strings.Split(b, "\n") {
			if strings.HasPrefix(l, "$ ") {
				texts = append(texts, l)
			}
		}
	}
	return matchCommands(texts, prefix)
}

func matchCommands(texts []string, prefix string) []string {
	re := regexp.MustCompile(`(?:^|[\s(;&|])(?:\./|sudo |sudo -u \w+ )?` + regexp.QuoteMeta(prefix) + `\b[^\n#|;&` + "`" + `]*`)
	var out []string
	for _, l := range texts {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			l = strings.TrimPrefix(strings.TrimSpace(l), "$ ")
		}
		for _, m := range re.FindAllString(l, -1) {
			out = append(out, strings.TrimSpace(m[strings.Index(m, prefix):]))
		}
	}
	return out
}

// TestMakeTargetsTheDocsNameExist: every `make X` in README.md and docs/ is a target of the
// Makefile.
func TestMakeTargetsTheDocsNameExist(t *testing.T) {
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_.-]+):`).FindAllStringSubmatch(read(t, "Makefile"), -1) {
		targets[m[1]] = true
	}
	for name, doc := range documents(t) {
		// A command: in a code span (`make x`) or at the start of a line (code blocks), not
		// the verb in prose ("labels that make a group").
		for _, m := range regexp.MustCompile("(?m)(?:^\\s*|`)make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(doc, -1) {
			if !targets[m[1]] {
				t.Errorf("%s names `make %s`, which the Makefile does not have", name, m[1])
			}
		}
	}
}

var flagRE = regexp.MustCompile(`(?:^|\s)(--(?:\[no-\])?[a-z][a-z0-9.-]*)`)

// TestFlagsTheReadmeUsesAreTheBinarys: every flag of every diskprobe_exporter command in
// README.md is one that command's --help lists, and the port the README curls is the
// default listen address.
func TestFlagsTheReadmeUsesAreTheBinarys(t *testing.T) {
	helpOf := helpReader(t)
	readme := read(t, "README.md")
	lines := append(commandLines(readme, "diskprobe_exporter"), transcriptCommands(readme, "diskprobe_exporter")...)
	if len(lines) == 0 {
		t.Fatal("README.md shows no diskprobe_exporter command")
	}
	for _, l := range lines {
		fields := strings.Fields(l)
		cmd := "serve"
		if len(fields) > 1 && slices.Contains([]string{"check", "cleanup", "arrival"}, fields[1]) {
			cmd = fields[1]
		}
		for _, m := range flagRE.FindAllStringSubmatch(l, -1) {
			flag, _, _ := strings.Cut(m[1], "=")
			bare := strings.Replace(flag, "--[no-]", "--", 1)
			if !helpLists(helpOf(cmd), bare) {
				t.Errorf("README.md: `%s` uses %s, which `diskprobe_exporter %s --help` does not list", l, flag, cmd)
			}
		}
	}
	// A flag quoted on its own (`--json`) belongs to one of the commands.
	for _, span := range codeSpans(readme) {
		if m := regexp.MustCompile(`^(--[a-z][a-z0-9.-]*)`).FindStringSubmatch(span); m != nil {
			if !helpLists(helpOf("serve")+helpOf("check")+helpOf("cleanup")+helpOf("arrival"), m[1]) {
				t.Errorf("README.md quotes %s, which no command's --help lists", m[1])
			}
		}
	}
	def := regexp.MustCompile(`--web.listen-address=:(\d+)`).FindStringSubmatch(helpOf("serve"))
	if def == nil {
		t.Fatal("--help shows no default --web.listen-address=:PORT")
	}
	for _, m := range regexp.MustCompile(`localhost:(\d+)`).FindAllStringSubmatch(readme, -1) {
		if m[1] != def[1] {
			t.Errorf("README.md reaches localhost:%s; the default listen address is :%s", m[1], def[1])
		}
	}
}

// helpReader returns the --help of a diskprobe_exporter command ("serve", "check",
// "cleanup", "arrival"), run once each.
func helpReader(t *testing.T) func(cmd string) string {
	bin := testenv.Binary(t)
	help := map[string]string{}
	return func(cmd string) string {
		if h, ok := help[cmd]; ok {
			return h
		}
		args := []string{"--help"}
		if cmd != "serve" {
			args = []string{cmd, "--help"}
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
		}
		help[cmd] = string(out)
		return help[cmd]
	}
}

// helpLists: kingpin's --help shows a flag as --name=DEFAULT, --name=VALUE, --name VALUE
// or --[no-]name for a boolean.
func helpLists(help, flag string) bool {
	name := strings.TrimPrefix(flag, "--")
	return regexp.MustCompile(`--(\[no-\])?` + regexp.QuoteMeta(name) + `[=\s]`).MatchString(help)
}

// TestMetricNamesTheDocsUseExist: every diskprobe_ metric name in README.md and docs/ is
// registered by the exporter (histogram suffixes allowed) or recorded by the rules.
func TestMetricNamesTheDocsUseExist(t *testing.T) {
	known := map[string]bool{}
	for _, n := range collector.MetricNames() {
		known[n] = true
	}
	// The binary's name; paths (/etc/diskprobe_exporter/) and recording rules
	// (target:diskprobe_...) are told apart by what precedes the name.
	notMetrics := map[string]bool{"diskprobe_exporter": true}
	name := regexp.MustCompile(`(^|[^a-z0-9_/:.-])(diskprobe_[a-z0-9_]+)`)
	for file, doc := range documents(t) {
		for _, m := range name.FindAllStringSubmatch(doc, -1) {
			n := m[2]
			if notMetrics[n] {
				continue
			}
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && known[b] {
					base = b
				}
			}
			if !known[base] && !documentedMetricsHave(t, base) {
				t.Errorf("%s names %s, which the exporter does not register", file, n)
			}
		}
	}
}

// documentedMetricsHave: a name of docs/metrics.md's table, which its own test compares with
// the exporter (a metric being added on another branch is in the table first).
func documentedMetricsHave(t *testing.T, name string) bool {
	_, ok := documentedMetrics(t)[name]
	return ok
}

// TestConfigSnippetsInTheReadmeParse: every YAML snippet of README.md that configures a
// target is valid configuration.
func TestConfigSnippetsInTheReadmeParse(t *testing.T) {
	n := 0
	for _, b := range codeBlocks(read(t, "README.md"), "yaml") {
		trimmed := strings.TrimSpace(b)
		if !strings.HasPrefix(trimmed, "- name:") && !strings.HasPrefix(trimmed, "targets:") {
			continue
		}
		n++
		if !strings.HasPrefix(trimmed, "targets:") {
			b = "targets:\n" + b
		}
		if _, err := config.Parse([]byte(b), "/etc/diskprobe_exporter/diskprobe.yml"); err != nil {
			t.Errorf("README.md's configuration snippet does not parse: %v\n%s", err, b)
		}
	}
	if n == 0 {
		t.Error("README.md shows no target configuration")
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// repoBlob is where this repository's files are read on the forge.
const repoBlob = "https://github.com/diskprobe/diskprobe_exporter/blob/main/"

// TestLinksBetweenTheDocsResolve: every relative link of README.md and docs/ names a file of
// the repository, and its #anchor a heading of that file, as GitHub makes them. The
// benchmark report (BENCHMARKS.md, the index, and its sections in docs/benchmarks/, which
// tests/cmd/benchmarks splits and relinks) too.
func TestLinksBetweenTheDocsResolve(t *testing.T) {
	docs := documents(t)
	docs["BENCHMARKS.md"] = read(t, "BENCHMARKS.md")
	sections, err := filepath.Glob(testenv.RepoPath("docs", "benchmarks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sections {
		docs["docs/benchmarks/"+filepath.Base(f)] = read(t, "docs/benchmarks/"+filepath.Base(f))
	}
	for name, doc := range docs {
		for _, m := range linkRE.FindAllStringSubmatch(doc, -1) {
			target := m[1]
			file, anchor, _ := strings.Cut(target, "#")
			path := name
			switch {
			case strings.HasPrefix(file, repoBlob):
				// A link into this repository's main branch (the packaged documents use
				// them, see TestPackagedDocumentsLinkWhereThePackageInstallsThem) names a
				// file of this checkout.
				path = strings.TrimPrefix(file, repoBlob)
			case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:"):
				continue
			case file != "":
				path = filepath.Clean(filepath.Join(filepath.Dir(name), file))
			}
			data, err := os.ReadFile(testenv.RepoPath(path))
			if errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s links to %s, which does not exist", name, target)
				continue
			}
			if anchor == "" || err != nil {
				continue
			}
			if !slices.Contains(anchors(string(data)), anchor) {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", name, target, path, anchor)
			}
		}
	}
}

var htmlAnchorRE = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)

// anchors are the GitHub anchors of doc's headings and <a id> tags (outside code blocks).
func anchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	inCode := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1]) // <a id="fsync"></a>: the benchmark report's short names
		}
		if headingLevel(l) == 0 {
			continue
		}
		a := slug(strings.TrimLeft(l, "# "))
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+string(rune('0'+n)))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '—' && r != '’' && r != '…':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestTheReadmesCheckCommandRuns runs the first `check` command README.md gives, as written
// (the binary built from this checkout in place of ./diskprobe_exporter): a newcomer's first
// copy-paste must work. PASS or FAIL depends on the disk; an error (exit 2) is the failure.
func TestTheReadmesCheckCommandRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 22 MiB to the command's directory")
	}
	var first string
	for _, l := range commandLines(read(t, "README.md"), "diskprobe_exporter check") {
		first = l
		break
	}
	if first == "" {
		t.Fatal("README.md shows no `diskprobe_exporter check` command")
	}
	args := strings.Fields(first)[1:]
	out, err := exec.Command(testenv.Binary(t), args...).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		t.Fatalf("README.md's `%s` failed: %v\n%s", first, err, out)
	}
	if !regexp.MustCompile(`(?m)^(PASS|FAIL)  fdatasync p99`).Match(out) {
		t.Errorf("README.md's `%s` printed no verdict:\n%s", first, out)
	}

	// The verdict the README shows on its first screen is the report as check prints it
	// now: each line of it, up to its first figure (or its label), begins a line of this
	// run's report (PASS and FAIL alike; WARN lines depend on the disk).
	// The block may make the probe directory first: what follows its check command.
	shown := ""
	for _, b := range codeBlocks(read(t, "README.md"), "console") {
		if loc := regexp.MustCompile(`(?m)^\$ (sudo )?(\./)?diskprobe_exporter check `).FindStringIndex(b); loc != nil {
			shown = b[loc[0]:]
			break
		}
	}
	if shown == "" {
		t.Fatal("README.md shows no check verdict (a console block running diskprobe_exporter check)")
	}
	// Columns are aligned to this run's figures, so runs of spaces compare as one.
	squeeze := func(s string) string {
		return regexp.MustCompile(`[ \t]+`).ReplaceAllString(strings.TrimLeft(s, " "), " ")
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		lines = append(lines, squeeze(l))
	}
	got := regexp.MustCompile(`(?m)^FAIL `).ReplaceAllString(strings.Join(lines, "\n"), "PASS ")
	for _, l := range strings.Split(shown, "\n")[1:] {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "WARN") {
			continue
		}
		head := l
		if i := strings.IndexAny(l, "0123456789"); i >= 0 {
			head = l[:i]
		}
		if m := regexp.MustCompile(`^[a-z]+:`).FindString(l); m != "" {
			head = m // "path:", "device:": what follows is this machine's
		}
		if head = strings.TrimRight(squeeze(head), " "); head == "" {
			continue
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(head)).MatchString(got) {
			t.Errorf("README.md's verdict shows a line %q that check no longer prints:\n%s", l, out)
		}
	}
}

// TestTheReadmeNamesTheGoVersionOfGoMod: the Go version a newcomer is told to install is
// the one go.mod requires.
func TestTheReadmeNamesTheGoVersionOfGoMod(t *testing.T) {
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindStringSubmatch(read(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	readme := read(t, "README.md")
	if !strings.Contains(readme, "**Go "+m[1]+"**") || !strings.Contains(readme, "`go "+m[1]+m[2]+"`") {
		t.Errorf("README.md's Quick start does not name Go %s (go.mod: go %s%s)", m[1], m[1], m[2])
	}
}

// TestRepositoryPathsAndChartValuesTheReadmeUsesExist: the files of the checkout README.md's
// commands name (the etcd preset, the dashboards) exist, and every `--set key=` of its helm
// command is a key of the chart's values.yaml.
func TestRepositoryPathsAndChartValuesTheReadmeUsesExist(t *testing.T) {
	readme := read(t, "README.md")
	paths := regexp.MustCompile(`(?:^|[\s(`+"`"+`])((?:charts|examples|alerts|dashboards|packaging|systemd|mixin)/[A-Za-z0-9_./*-]+)`).FindAllStringSubmatch(readme, -1)
	if len(paths) == 0 {
		t.Fatal("README.md names no file of the checkout")
	}
	for _, m := range paths {
		p := strings.TrimRight(m[1], ".")
		matches, err := filepath.Glob(testenv.RepoPath(p))
		if err != nil || len(matches) == 0 {
			t.Errorf("README.md names %s, which is not in the repository", p)
		}
	}
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "charts/diskprobe-exporter/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`--set ([A-Za-z0-9_.]+)=`).FindAllStringSubmatch(readme, -1) {
		node := any(values)
		for _, k := range strings.Split(m[1], ".") {
			mm, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			node, ok = mm[k]
			if !ok {
				t.Errorf("README.md sets %s, which the chart's values.yaml does not have", m[1])
				break
			}
		}
	}
}
