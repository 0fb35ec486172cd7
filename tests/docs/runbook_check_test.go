package docs

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocumentedProbesListsKeepTheDefaultVerdicts: `check --probes` replaces the default list
// (fsync and commit), so a list that names fsync without commit drops etcd's 25 ms commit
// verdict; the runbook's "adds the read probes" did. And its check command wrote inside
// etcd's data directory (no --probe-dir) and had no Kubernetes form.
func TestDocumentedProbesListsKeepTheDefaultVerdicts(t *testing.T) {
	for name, doc := range documents(t) {
		for _, m := range regexp.MustCompile(`--probes=([a-z,]+)`).FindAllStringSubmatch(doc, -1) {
			probes := strings.Split(m[1], ",")
			if slices.Contains(probes, "fsync") && !slices.Contains(probes, "commit") {
				t.Errorf("%s: %s drops the commit verdict (--probes replaces the default fsync,commit)", name, m[0])
			}
		}
	}
	tools := section(t, read(t, "docs/runbook.md"), "docs/runbook.md", "## Tools used throughout")
	for _, cmd := range commandLines(tools, "diskprobe_exporter check") {
		if !strings.Contains(cmd, "--probe-dir=") {
			t.Errorf("docs/runbook.md: `%s` writes inside the directory it measures; etcd's needs --probe-dir", cmd)
		}
	}
	if !strings.Contains(tools, "kubectl -n diskprobe apply -f examples/kubernetes/check-job.yaml") {
		t.Error("docs/runbook.md's check has no Kubernetes form (the check Job)")
	}
}
