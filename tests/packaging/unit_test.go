package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestUnitStopTimeoutCoversTheExporterShutdown: without TimeoutStopSec systemd waits its
// default 90 s after SIGTERM, where docs/configuration.md promises an exit within a few seconds. The
// unit's timeout must leave the exporter the time it promises (systemd would SIGKILL an
// exporter keeping its promise) and be well under the default.
func TestUnitStopTimeoutCoversTheExporterShutdown(t *testing.T) {
	root := testenv.RepoPath()
	unit, err := os.ReadFile(filepath.Join(root, "systemd", unitName))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)s$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("%s sets no TimeoutStopSec=<seconds>s: systemd then waits 90 s after SIGTERM", unitName)
	}
	p := regexp.MustCompile(`exit within (\d+) s`).FindSubmatch(readme)
	if p == nil {
		t.Fatal(`docs/configuration.md no longer says "exit within N s" after SIGTERM: update this test`)
	}
	timeout, _ := strconv.Atoi(string(m[1]))
	promise, _ := strconv.Atoi(string(p[1]))
	t.Logf("TimeoutStopSec %ds, the documented promise %ds", timeout, promise)
	if 2*timeout < 3*promise || timeout >= 90 {
		t.Errorf("TimeoutStopSec=%ds: want at least 1.5 × the documented %d s (margin for a loaded host) and under systemd's default 90 s", timeout, promise)
	}
}
