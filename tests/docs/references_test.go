package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestCommentsPointAtSectionsThatExist: the Makefile's, the chart's (values files, README,
// NOTES) and the example configuration's comments send a reader to `README's "Heading"`, `README.md ("Heading")` or `docs/x.md's "Heading"`:
// each heading exists (they named a README "Releases" and sections of a README that had
// moved).
func TestCommentsPointAtSectionsThatExist(t *testing.T) {
	ref := regexp.MustCompile(`(README|docs/[a-z]+\.md)(?:\.md)?(?:'s|,)? \(?"([^"]+)"`)
	n := 0
	for _, file := range []string{"Makefile", "charts/diskprobe-exporter/values.yaml", "charts/diskprobe-exporter/values-etcd.yaml", "charts/diskprobe-exporter/README.md", "charts/diskprobe-exporter/templates/NOTES.txt", "examples/diskprobe.yml"} {
		for _, m := range ref.FindAllStringSubmatch(read(t, file), -1) {
			doc := m[1]
			if doc == "README" {
				doc = "README.md"
			}
			n++
			if !slices.Contains(headings(read(t, doc)), m[2]) {
				t.Errorf("%s points at %s %q, which has no such heading (%q)", file, doc, m[2], headings(read(t, doc)))
			}
		}
	}
	if n == 0 {
		t.Error("no comment points at a section of the documents; the test reads none")
	}
}

// headings are the texts of doc's headings (outside code blocks), and the labels of its
// top-level bullets that open a section ("- Releases: one version number." in
// docs/development.md).
func headings(doc string) []string {
	var out []string
	inCode := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		if headingLevel(l) > 0 {
			out = append(out, strings.TrimLeft(l, "# "))
		}
		if m := bulletLabel.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// nfpmConfig is the .deb's nfpm configuration as `make package` gives it to nfpm:
// packaging/nfpm.yaml, or what packaging/nfpm-config.sh makes of it where that script adds
// entries (the documents, one by one).
func nfpmConfig(t *testing.T) []byte {
	t.Helper()
	script := testenv.RepoPath("packaging", "nfpm-config.sh")
	if _, err := os.Stat(script); err != nil {
		return []byte(read(t, "packaging/nfpm.yaml"))
	}
	out, err := exec.Command("sh", script, "deb", "dist/.stage").Output()
	if err != nil {
		t.Fatalf("%s deb: %v", script, err)
	}
	return out
}

var bulletLabel = regexp.MustCompile(`^- ([A-Z][A-Za-z ]+):`)

// TestPackagedDocumentsLinkWhereThePackageInstallsThem: the package installs README.md and
// docs/*.md where packaging/nfpm.yaml says (README.md beside the guides, not above a docs/
// directory). A relative link of one of them must reach, from where the package puts it, the
// place the package puts its target; otherwise it links to the forge
// (https://github.com/diskprobe/diskprobe_exporter/blob/main/…).
func TestPackagedDocumentsLinkWhereThePackageInstallsThem(t *testing.T) {
	var nfpm struct {
		Contents []struct{ Src, Dst string }
	}
	if err := yaml.Unmarshal(nfpmConfig(t), &nfpm); err != nil {
		t.Fatal(err)
	}
	// installed maps a file of the repository to where the package puts it.
	installed := map[string]string{}
	for _, c := range nfpm.Contents {
		src := strings.TrimPrefix(c.Src, "./")
		if src == "" || !strings.HasSuffix(src, ".md") {
			continue
		}
		files, err := filepath.Glob(testenv.RepoPath(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			rel, _ := filepath.Rel(testenv.RepoPath(), f)
			dst := c.Dst
			if strings.HasSuffix(dst, "/") {
				dst = filepath.Join(dst, filepath.Base(f))
			}
			installed[rel] = dst
		}
	}
	if installed["README.md"] == "" {
		t.Fatal("packaging/nfpm.yaml installs no README.md")
	}
	for doc, dst := range installed {
		for _, m := range linkRE.FindAllStringSubmatch(read(t, doc), -1) {
			file, _, _ := strings.Cut(m[1], "#")
			if file == "" || strings.Contains(file, "://") || strings.HasPrefix(file, "mailto:") {
				continue
			}
			target := filepath.Clean(filepath.Join(filepath.Dir(doc), file))
			where, ok := installed[target]
			switch {
			case !ok:
				t.Errorf("%s (installed as %s) links to %s, which the package does not install: link to %s%s", doc, dst, file, repoBlob, target)
			case filepath.Clean(filepath.Join(filepath.Dir(dst), file)) != where:
				t.Errorf("%s (installed as %s) links to %s, which the package installs as %s: the link is broken there", doc, dst, file, where)
			}
		}
	}
}

// TestNoDocumentedCheckWritesInsideEtcdsDataDirectory: every `check` of etcd's data
// directory the documents show writes its files beside it (--probe-dir), as the project
// asks of its users: etcd warns at start about any entry of its data directory it does not
// know, and nothing of ours belongs there.
func TestNoDocumentedCheckWritesInsideEtcdsDataDirectory(t *testing.T) {
	n := 0
	for name, doc := range documents(t) {
		for _, l := range append(commandLines(doc, "diskprobe_exporter check"), transcriptCommands(doc, "diskprobe_exporter check")...) {
			f := strings.Fields(l)
			if f[len(f)-1] != "/var/lib/etcd" {
				continue
			}
			n++
			if !strings.Contains(l, "--probe-dir") {
				t.Errorf("%s: `%s` writes inside /var/lib/etcd: give --probe-dir a directory beside it", name, l)
			}
		}
	}
	if n == 0 {
		t.Error("no document checks /var/lib/etcd; the test reads none")
	}
}

// TestReadmeInstallsTheRelease: the release assets and chart versions README.md installs are
// named as the release workflow publishes them, at the release in VERSION: a README left at
// the last release sends users to the wrong packages.
func TestReadmeInstallsTheRelease(t *testing.T) {
	v := strings.TrimSpace(read(t, "VERSION"))
	readme := read(t, "README.md")
	vre := `([0-9]+\.[0-9]+\.[0-9]+)`
	for _, p := range []struct{ what, re string }{
		{"a .deb", `diskprobe-exporter_` + vre + `-1_(?:amd64|arm64)\.deb`},
		{"an .rpm", `diskprobe-exporter-` + vre + `-1\.(?:x86_64|aarch64)\.rpm`},
		{"a tarball", `diskprobe_exporter-` + vre + `\.linux-(?:amd64|arm64)\.tar\.gz`},
		{"a release download", `/releases/download/v` + vre + `/`},
		{"a chart version", `diskprobe-exporter --version ` + vre},
	} {
		ms := regexp.MustCompile(p.re).FindAllStringSubmatch(readme, -1)
		if len(ms) == 0 {
			t.Errorf("README.md names no %s (%s)", p.what, p.re)
		}
		for _, m := range ms {
			if m[1] != v {
				t.Errorf("README.md names %s %s; the release (VERSION) is %s", p.what, m[0], v)
			}
		}
	}
}

// TestMeasuredFiguresHaveOneSource: the exporter's memory and its series per target are
// measured in BENCHMARKS.md and only written there; the other documents link to it. Three RSS
// figures and two series counts for one measurement stood in four documents at once.
func TestMeasuredFiguresHaveOneSource(t *testing.T) {
	restated := regexp.MustCompile(`(?i)\b\d+(?:\.\d+)? MiB (?:of )?RSS\b|\bRSS (?:of )?\d+(?:\.\d+)? MiB|\b\d+ series (?:per|a) target\b|\bexposes \d+ series\b`)
	for name, doc := range documents(t) {
		for _, m := range restated.FindAllString(doc, -1) {
			t.Errorf("%s states %q: the figure lives in BENCHMARKS.md (#memory, #what-prometheus-sees); link to it", name, m)
		}
	}
}

// TestKubernetesValuesTableHasARowPerTopLevelValue: every top-level key of the chart's
// values.yaml is in the first column of docs/kubernetes.md's Values table, and every key
// there is a top-level value: `imagePullSecrets` stood in the `image` row, read as
// image.imagePullSecrets, which the chart does not take.
func TestKubernetesValuesTableHasARowPerTopLevelValue(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "charts/diskprobe-exporter/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	doc := read(t, "docs/kubernetes.md")
	listed := map[string]bool{}
	for _, row := range tableRows(section(t, doc, "docs/kubernetes.md", "## Values")) {
		for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(row[0], -1) {
			listed[m[1]] = true
			if _, ok := values[m[1]]; !ok {
				t.Errorf("docs/kubernetes.md's Values table has a row for %s, which is no top-level value of values.yaml", m[1])
			}
		}
	}
	for k := range values {
		if !listed[k] {
			t.Errorf("values.yaml's %s has no row of its own in docs/kubernetes.md's Values table", k)
		}
	}
}

// TestDocumentedDockerBuildTagsAndStampsTheImage: a `docker build` the documents give names
// the image (-t) and passes every build argument of Containerfile (the version and revision
// its labels carry); without them the image has no name and says version 0.0.0.
func TestDocumentedDockerBuildTagsAndStampsTheImage(t *testing.T) {
	var args []string
	for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)`).FindAllStringSubmatch(read(t, "Containerfile"), -1) {
		args = append(args, m[1])
	}
	n := 0
	for name, doc := range documents(t) {
		for _, l := range commandLines(doc, "docker build") {
			n++
			if !regexp.MustCompile(`\s-t\s`).MatchString(l) {
				t.Errorf("%s: `%s` does not name the image (-t)", name, l)
			}
			for _, a := range args {
				if !strings.Contains(l, "--build-arg "+a+"=") {
					t.Errorf("%s: `%s` does not pass --build-arg %s=, which Containerfile takes", name, l, a)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no document gives a docker build command; the test reads none")
	}
}

// TestDocumentedPackageInstallsNameAFileThatIsThere: `apt install ./…` and `dnf install ./…`
// in the documents install a package from where it is: dist/ (make package writes there), or
// the file the same block downloads. docs/install.md installed ./diskprobe-exporter_….deb
// right after `make package`, which is not there.
func TestDocumentedPackageInstallsNameAFileThatIsThere(t *testing.T) {
	install := regexp.MustCompile(`(?:apt|dnf|apt-get|yum) install (?:-y )?\./(\S+)`)
	n := 0
	for name, doc := range documents(t) {
		for _, b := range codeBlocks(doc, "", "sh") {
			for _, m := range install.FindAllStringSubmatch(b, -1) {
				n++
				file := m[1]
				if strings.HasPrefix(file, "dist/") {
					continue
				}
				if !regexp.MustCompile(`curl [^\n]*/` + regexp.QuoteMeta(file) + `\b`).MatchString(b) {
					t.Errorf("%s installs ./%s, which neither make package (dist/) nor the block's download puts there", name, file)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no document installs a package; the test reads none")
	}
}

// TestFstabEditsAreFollowedByDaemonReload: a documented edit of /etc/fstab is followed, in
// its block, by `systemctl daemon-reload` before the mount: systemd generates mount units
// from fstab, and mount(8) warns while it still uses the old version.
func TestFstabEditsAreFollowedByDaemonReload(t *testing.T) {
	n := 0
	for name, doc := range documents(t) {
		for _, b := range codeBlocks(doc, "", "sh") {
			i := strings.Index(b, "/etc/fstab")
			if i < 0 {
				continue
			}
			n++
			rest := b[i:]
			reload := strings.Index(rest, "systemctl daemon-reload")
			mount := regexp.MustCompile(`(?m)\bmount /`).FindStringIndex(rest)
			if reload < 0 || mount != nil && mount[0] < reload {
				t.Errorf("%s edits /etc/fstab without systemctl daemon-reload before the mount:\n%s", name, b)
			}
		}
	}
	if n == 0 {
		t.Error("no document edits /etc/fstab; the test reads none")
	}
}
