package docs

import (
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSampleLinksWhatItsTrimmedWarningsMean: the README's check sample trims the
// "host's CPUs, not the disk" WARNs every busy node prints; whether the verdict stands with
// them is in docs/check.md, which the sample must link.
func TestReadmeSampleLinksWhatItsTrimmedWarningsMean(t *testing.T) {
	readme := read(t, "README.md")
	_, after, ok := strings.Cut(readme, "```console")
	if !ok {
		t.Fatal("README.md has no console sample")
	}
	_, after, _ = strings.Cut(after, "```\n")
	para, _, _ := strings.Cut(after, "\n\n")
	m := regexp.MustCompile(`docs/check\.md#([a-z0-9-]+)`).FindStringSubmatch(para)
	if m == nil {
		t.Fatalf("the paragraph after README.md's check sample links no section of docs/check.md:\n%s", para)
	}
	check := read(t, "docs/check.md")
	for _, l := range strings.Split(check, "\n") {
		if headingLevel(l) > 0 && slug(strings.TrimLeft(l, "# ")) == m[1] {
			if !strings.Contains(section(t, check, "docs/check.md", l), "the host's CPUs, not the disk") {
				t.Errorf("docs/check.md#%s does not explain the CPU warnings", m[1])
			}
			return
		}
	}
	t.Errorf("README.md links docs/check.md#%s, which is no heading", m[1])
}

// TestProbeDirectoryIsMadeBeforeItIsUsed: the README's first command ran check with
// --probe-dir=/var/lib/diskprobe-etcd, a directory made 120 lines later.
func TestProbeDirectoryIsMadeBeforeItIsUsed(t *testing.T) {
	for name, doc := range documents(t) {
		lines := strings.Split(doc, "\n")
		for i, l := range lines {
			if strings.Contains(l, "check-job.yaml") {
				continue // the Job's pods have the kubelet make it (DirectoryOrCreate)
			}
			for _, m := range regexp.MustCompile(`diskprobe_exporter check [^\n`+"`"+`]*--probe-dir=(/\S+)`).FindAllStringSubmatch(l, -1) {
				made := regexp.MustCompile(`(install -d|mkdir -p)[^\n]*\s` + regexp.QuoteMeta(m[1]) + `(\s|$|'|")`)
				ok := false
				for _, prev := range lines[:i+1] {
					ok = ok || made.MatchString(prev)
				}
				if !ok {
					t.Errorf("%s:%d: check --probe-dir=%s before any command makes %s", name, i+1, m[1], m[1])
				}
			}
		}
	}
}
