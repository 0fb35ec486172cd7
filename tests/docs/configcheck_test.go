package docs

import (
	"regexp"
	"strings"
	"testing"
)

// TestConfigCheckIsRunAsTheServiceUser: --config.check checks as whoever runs it; as root it
// passes a probe directory the service's user cannot write, which the service then refuses.
// The packaged configuration, the file the admin edits, said plain `--config.check`.
func TestConfigCheckIsRunAsTheServiceUser(t *testing.T) {
	for _, name := range []string{"packaging/diskprobe.yml", "README.md", "docs/install.md", "docs/runbook.md"} {
		doc := read(t, name)
		for _, loc := range regexp.MustCompile(`diskprobe_exporter --config\.check`).FindAllStringIndex(doc, -1) {
			before := doc[max(0, loc[0]-16):loc[0]]
			// In a pod (kubectl exec … /bin/diskprobe_exporter) it runs as the pod's user.
			if !strings.HasSuffix(before, "-u diskprobe ") && !strings.HasSuffix(before, "/bin/") {
				t.Errorf("%s: `%s` checks as whoever runs it; the service runs as diskprobe (sudo -u diskprobe)", name, doc[max(0, loc[0]-16):loc[1]])
			}
		}
	}
}
