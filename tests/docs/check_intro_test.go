package docs

import (
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/config"
)

// TestCheckDocSaysHowItsFiguresDifferFromTheExporters: check.md promised "the figures the
// exporter will report later"; the code is the same, the files and rates are not, and a PASS
// and a later warning can both be right.
func TestCheckDocSaysHowItsFiguresDifferFromTheExporters(t *testing.T) {
	doc := read(t, "docs/check.md")
	intro, _, _ := strings.Cut(doc, "\n## ")
	flat := strings.Join(strings.Fields(intro), " ")
	if strings.Contains(flat, "figures are the ones the exporter will report") {
		t.Error("docs/check.md says check's figures are the exporter's")
	}
	tg, err := parseTarget(t, "    fsync: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		strings.Replace(config.FormatSize(check.DefaultSize), "MiB", " MiB", 1),
		strings.Replace(config.FormatSize(tg.Probe["fsync"].FileSize), "MiB", " MiB", 1),
		"DiskprobeFdatasyncP99AboveEtcdTarget",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/check.md's introduction does not say %q: what differs between check and the exporter, and why both can be right", want)
		}
	}
}
