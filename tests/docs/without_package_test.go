package docs

import (
	"strings"
	"testing"
)

// TestRulesAndDashboardsAreFoundWithoutThePackage: README's rule_files points where the
// package installs the rules; without the package they are in the tarball, which must say so
// and hold them.
func TestRulesAndDashboardsAreFoundWithoutThePackage(t *testing.T) {
	readme := read(t, "README.md")
	prom := section(t, readme, "README.md", "## Prometheus and Grafana")
	for _, want := range []string{"alerts/diskprobe.rules.yml", "dashboards/"} {
		if !strings.Contains(prom, want) {
			t.Errorf("README.md's Prometheus and Grafana section does not say where %s is without the package", want)
		}
	}
	// make release's recipe (packaging/release.sh): the tarball's part of it.
	release := read(t, "packaging/release.sh")
	release = release[strings.Index(release, "\n# Per architecture"):]
	release = release[:strings.Index(release, "\n\n")]
	for _, want := range []string{"alerts/diskprobe.rules.yml", "dashboards/*.json", "examples/kubernetes/*.yaml"} {
		if !strings.Contains(release, want) {
			t.Errorf("make release puts no %s in the tarball", want)
		}
	}
}
