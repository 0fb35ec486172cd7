package docs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/config"
)

// TestProbeFileFiguresAreTheDefaults: the etcd preset's probe files were "about 320 MiB a
// node" in four places, the size before its commit probe. The figures a node's cleanup and
// cost are read from come from the configuration's defaults.
func TestProbeFileFiguresAreTheDefaults(t *testing.T) {
	size := func(body string) int64 {
		tg, err := parseTarget(t, body)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for name, p := range tg.Probe {
			switch name {
			case "randread", "seqread":
			default:
				n += p.FileSize
			}
		}
		return n + tg.ReadFileSize()
	}
	defaults := size("    fsync: {}\n    randread: {}\n    seqread: {}\n") >> 20
	preset := size("    fsync: {}\n    randread: {}\n    commit: {}\n") >> 20
	perNode := regexp.MustCompile(`(\d+) MiB a node`)
	n := 0
	for name, doc := range userDocs(t) {
		flat := strings.Join(strings.Fields(strings.ReplaceAll(doc, "#", "")), " ")
		for _, idx := range perNode.FindAllStringSubmatchIndex(flat, -1) {
			n++
			fig := flat[idx[2]:idx[3]]
			before := flat[max(0, idx[0]-160):idx[0]]
			after := flat[idx[1]:min(len(flat), idx[1]+40)]
			context := before + flat[idx[0]:idx[1]] + after
			if i := strings.IndexAny(after, ",;)"); i >= 0 {
				after = after[:i] // the figure's own clause
			}
			// The install a figure is of: named right after it ("320 MiB a node with the default
			// install"), else the nearer of the two names before it.
			var preceding bool
			switch ea, da := strings.Index(after, "etcd preset"), strings.Index(after, "default"); {
			case ea >= 0 && (da < 0 || ea < da):
				preceding = true
			case da >= 0:
				preceding = false
			default:
				preceding = strings.LastIndex(before, "etcd preset") > strings.LastIndex(before, "default")
			}
			switch {
			case preceding:
				if fig != fmt.Sprint(preset) {
					t.Errorf("%s: %q: the etcd preset's files are %d MiB a node", name, context, preset)
				}
			case fig != fmt.Sprint(defaults) && fig != fmt.Sprint(preset):
				t.Errorf("%s: %q: probe files are %d MiB a node (default install) or %d (etcd preset)", name, context, defaults, preset)
			}
		}
	}
	if n == 0 {
		t.Fatal("no \"MiB a node\" figure found: the test no longer reads what it guards")
	}
	// The check Job writes the fsync job's file, then the commit job's: not just 22 MiB.
	job := strings.Join(strings.Fields(strings.ReplaceAll(read(t, "examples/kubernetes/check-job.yaml"), "#", "")), " ")
	for _, want := range []string{config.FormatSize(check.DefaultSize), "32 MiB", "100 MiB"} {
		want = strings.Replace(want, "MiB", " MiB", 1)
		want = strings.Replace(want, "  ", " ", 1)
		if !strings.Contains(job, want) {
			t.Errorf("examples/kubernetes/check-job.yaml does not say %q (the fsync job's file, the commit job's, the free space it needs)", want)
		}
	}
}
