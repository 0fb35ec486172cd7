package docs

import (
	"strings"
	"testing"
)

// TestCheckoutInstallOfTheChartNamesTheImageMakeImageBuilt: `make image` tags a development
// version and the checkout's chart asks for the release's, so a helm install from ./charts
// must set image.tag to what make image built, or the pods never start.
func TestCheckoutInstallOfTheChartNamesTheImageMakeImageBuilt(t *testing.T) {
	readme := read(t, "README.md")
	n := 0
	for _, b := range codeBlocks(readme, "sh", "") {
		flat := strings.ReplaceAll(b, "\\\n", " ")
		for _, l := range strings.Split(flat, "\n") {
			if !strings.Contains(l, "helm install") || !strings.Contains(l, "./charts/diskprobe-exporter") {
				continue
			}
			n++
			if !strings.Contains(l, "image.tag=") {
				t.Errorf("README.md: `%s` installs the checkout's chart without the image.tag make image built", strings.TrimSpace(l))
			}
			if !strings.Contains(b, "packaging/version.sh --semver") || !strings.Contains(b, "make image") {
				t.Errorf("README.md: the block installing from ./charts does not build the image and name its tag (make image, packaging/version.sh --semver):\n%s", b)
			}
		}
	}
	if n == 0 {
		t.Error("README.md has no install of the chart from a checkout")
	}
	if !strings.Contains(read(t, "Makefile"), "--set image.tag=$(TAG)") {
		t.Error("make image does not print the image.tag to install the checkout's chart with")
	}
}
