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

// TestUnitReloadNeedsNoProcps: `systemctl reload` runs ExecReload=, and a minimal Debian has
// no /bin/kill (procps), which the package does not depend on. The unit reloads through the
// shell's kill builtin (dash is Essential); tests/systemd runs it on such a system.
func TestUnitReloadNeedsNoProcps(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(testenv.RepoPath(), "systemd", unitName))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecReload=(.*)$`).FindAllSubmatch(unit, -1)
	if len(m) != 1 {
		t.Fatalf("%s has %d ExecReload= lines, want 1", unitName, len(m))
	}
	reload := string(m[0][1])
	t.Logf("ExecReload=%s", reload)
	if !regexp.MustCompile(`^/bin/sh -c '(kill -HUP|kill -s HUP) (\$\{MAINPID\}|"\$\$MAINPID")'$`).MatchString(reload) {
		t.Errorf("ExecReload=%s: want the shell's kill builtin, /bin/sh -c 'kill -HUP ${MAINPID}' (no /bin/kill, no exec)", reload)
	}
}

// TestUnitReadsNoDiskUnlessADropInGrantsIt: the disk group reads every disk, hence every file
// on the host (etcd's keys included), and the default configuration probes no device. The
// unit grants neither the group nor a block device; the example drop-in (shipped in the
// package's doc/examples) grants the group and named devices only, read-only.
func TestUnitReadsNoDiskUnlessADropInGrantsIt(t *testing.T) {
	root := testenv.RepoPath()
	unit, err := os.ReadFile(filepath.Join(root, "systemd", unitName))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^SupplementaryGroups=`, `(?m)^DeviceAllow=`} {
		if m := regexp.MustCompile(re + `.*$`).Find(unit); m != nil {
			t.Errorf("%s grants %q by default; a block-device target's drop-in should", unitName, m)
		}
	}
	if !regexp.MustCompile(`(?m)^DevicePolicy=closed$`).Match(unit) {
		t.Errorf("%s has no DevicePolicy=closed", unitName)
	}
	dropIn, err := os.ReadFile(filepath.Join(root, "systemd", "devices.conf"))
	if err != nil {
		t.Fatal(err)
	}
	allows := regexp.MustCompile(`(?m)^DeviceAllow=(.*)$`).FindAllSubmatch(dropIn, -1)
	if len(allows) == 0 || !regexp.MustCompile(`(?m)^SupplementaryGroups=disk$`).Match(dropIn) {
		t.Errorf("systemd/devices.conf should grant SupplementaryGroups=disk and DeviceAllow= a device:\n%s", dropIn)
	}
	for _, a := range allows {
		if !regexp.MustCompile(`^/dev/\S+ r$`).Match(a[1]) {
			t.Errorf("systemd/devices.conf: DeviceAllow=%s, want one device node, read-only (/dev/... r)", a[1])
		}
	}
}
