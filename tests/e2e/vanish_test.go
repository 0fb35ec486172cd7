package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestVanishedFilesystemIsAnErrorNotAnotherDisk lazily unmounts the filesystem under a
// running target, as when a disk is pulled or a mount goes away under a running etcd.
// The target's path is then a plain directory on the parent filesystem: the exporter must
// count errors (logged once per change of state, not once per round), must not start
// probing — or writing a 4 MiB read probe file onto — the filesystem underneath, must
// leave its other targets alone, and must recover by itself when the filesystem is back.
func TestVanishedFilesystemIsAnErrorNotAnotherDisk(t *testing.T) {
	testenv.RequireRoot(t)
	dev, dir := testenv.LoopExt4(t, 128<<20)
	steadyDir := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: vanish
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 4MiB}
    randread: {interval: 1s, ops: 2, file_size: 4MiB}
    limits: {timeout: 10s, min_free: 0}
  - name: steady
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 4MiB}
    limits: {timeout: 10s, min_free: 0}
`, dir, steadyDir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 20*time.Second, "fsync and randread rounds on the loop filesystem", func(f families) bool {
		return runs(f, "vanish", "fsync") >= 2 && runs(f, "vanish", "randread") >= 2
	})

	testenv.Run(t, "umount", "-l", dir)
	gone := e.MustScrape()
	remounted := false
	t.Cleanup(func() {
		if !remounted {
			os.RemoveAll(filepath.Join(dir, ".diskprobe")) // only ever on the parent filesystem
		}
	})
	time.Sleep(6 * time.Second)
	during := e.MustScrape()

	for _, probe := range []string{"fsync", "randread"} {
		if d := errs(during, "vanish", probe) - errs(gone, "vanish", probe); d < 3 {
			t.Errorf("%s: %.0f errors in 6 rounds after the filesystem went away; want every round counted", probe, d)
		}
		if n := errorLines(e, "vanish", probe); n > 1 {
			t.Errorf("%s: %d error lines in 6 rounds; want one per change of state:\n%s", probe, n, strings.Join(logLines(e, "target=vanish", "probe="+probe), "\n"))
		}
	}
	lines := logLines(e, `msg="probe failed"`, "target=vanish", "probe=fsync")
	if len(lines) == 0 || !strings.Contains(lines[0], "no longer on the filesystem") {
		t.Errorf("the error does not say the filesystem went away: %q", lines)
	} else {
		t.Logf("logged: %s", lines[0])
	}
	if _, err := os.Lstat(filepath.Join(dir, ".diskprobe")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(dir, ".diskprobe"))
		t.Errorf("the exporter wrote into the filesystem underneath the vanished mount: %s/.diskprobe has %d entries", dir, len(entries))
	}
	if d := runs(during, "steady", "fsync") - runs(gone, "steady", "fsync"); d < 4 || errs(during, "steady", "fsync") != 0 {
		t.Errorf("the other target was disturbed: %.0f rounds in 6s, %.0f errors", d, errs(during, "steady", "fsync"))
	}
	alive(t, e)

	// The filesystem is back at its path: probing resumes without a restart.
	os.RemoveAll(filepath.Join(dir, ".diskprobe"))
	testenv.Run(t, "mount", "-t", "ext4", dev, dir)
	remounted = true
	back := time.Now()
	framework.WaitMetric(t, e, 20*time.Second, "fsync and randread rounds after the remount", func(f families) bool {
		return lastSuccess(f, "vanish", "fsync") > float64(back.UnixNano())/1e9 &&
			lastSuccess(f, "vanish", "randread") > float64(back.UnixNano())/1e9
	})
	for _, probe := range []string{"fsync", "randread"} {
		if len(logLines(e, "probe recovered", "target=vanish", "probe="+probe)) == 0 {
			t.Errorf("%s: no log line saying the probe recovered", probe)
		}
	}
}

// TestTargetDirectoryReplaced deletes a target directory under the running exporter and
// creates it again, as a reinstall or a restore from backup does. The probe files must be
// created again in the new directory; the exporter must not crash or keep writing the
// deleted files.
func TestTargetDirectoryReplaced(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: replaced
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 4MiB}
    randread: {interval: 1s, ops: 2, file_size: 4MiB}
    seqwrite: {interval: 1s, bytes: 1MiB, block_size: 256KiB}
    limits: {timeout: 10s, min_free: 0}
`, dir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 20*time.Second, "fsync, randread and seqwrite rounds", func(f families) bool {
		return runs(f, "replaced", "fsync") >= 2 && runs(f, "replaced", "randread") >= 2 && runs(f, "replaced", "seqwrite") >= 2
	})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a few rounds with the directory missing
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	f := framework.WaitMetric(t, e, 20*time.Second, "rounds in the recreated directory", func(f families) bool {
		return lastSuccess(f, "replaced", "fsync") > float64(back.UnixNano())/1e9 &&
			lastSuccess(f, "replaced", "randread") > float64(back.UnixNano())/1e9 &&
			lastSuccess(f, "replaced", "seqwrite") > float64(back.UnixNano())/1e9
	})
	alive(t, e)
	for _, name := range []string{"fsync.probe", "read.probe", "seqwrite.probe"} {
		p := filepath.Join(dir, ".diskprobe", name)
		if h := probeHeader(t, p); !strings.HasPrefix(h, "diskprobe_exporter probe file") {
			t.Errorf("%s not recreated with our header: %q", p, h)
		}
	}
	if !strings.Contains(probeHeader(t, filepath.Join(dir, ".diskprobe", "read.probe")), "state=prepared") {
		t.Errorf("the read probe file was not prepared again in the new directory")
	}
	// The new fsync file is being written: its allocated data grows round by round.
	t.Logf("errors while the directory was missing: fsync %.0f, randread %.0f", errs(f, "replaced", "fsync"), errs(f, "replaced", "randread"))
}

// errorLines counts the "probe failed" lines and the preparation failures logged for a
// target's probe.
func errorLines(e *framework.Exporter, target, probe string) int {
	n := len(logLines(e, `msg="probe failed"`, "target="+target, "probe="+probe))
	if probe != "fsync" {
		n += len(logLines(e, "preparing the read probe file failed", "target="+target))
	}
	return n
}

// TestRawDeviceGoneToZeroIsAnErrorLoggedOnce shrinks a raw loop device under a running
// target to nothing, as a disk that drops off the bus looks to an open descriptor (its
// capacity goes to 0), and brings it back. (A plain `losetup -d` does nothing visible: the
// kernel defers the detach until the exporter's descriptor is closed.) Every read round
// fails, counted, logged once; the other target is unaffected; reads resume when the
// capacity is back.
func TestRawDeviceGoneToZeroIsAnErrorLoggedOnce(t *testing.T) {
	testenv.RequireRoot(t)
	dev := testenv.LoopDevice(t, 64<<20)
	backing := strings.TrimSpace(testenv.Run(t, "losetup", "--noheadings", "--output", "BACK-FILE", dev))
	steadyDir := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {interval: 1s, ops: 2}
  - name: steady
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    limits: {min_free: 0}
`, dev, steadyDir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "randread rounds on the raw device", func(f families) bool {
		return runs(f, "raw", "randread") >= 2 && runs(f, "steady", "fsync") >= 2
	})

	must(t, os.Truncate(backing, 0))
	testenv.Run(t, "losetup", "--set-capacity", dev)
	gone := e.MustScrape()
	time.Sleep(6 * time.Second)
	during := e.MustScrape()
	if d := errs(during, "raw", "randread") - errs(gone, "raw", "randread"); d < 3 {
		t.Errorf("%.0f errors in 6 rounds on a device gone to zero capacity", d)
	}
	lines := logLines(e, `msg="probe failed"`, "target=raw")
	if len(lines) != 1 {
		t.Errorf("%d error lines in 6 rounds; want one per change of state:\n%s", len(lines), strings.Join(lines, "\n"))
	} else {
		t.Logf("logged: %s", lines[0])
	}
	if d := runs(during, "steady", "fsync") - runs(gone, "steady", "fsync"); d < 4 || errs(during, "steady", "fsync") != 0 {
		t.Errorf("the other target was disturbed: %.0f rounds in 6s, %.0f errors", d, errs(during, "steady", "fsync"))
	}

	must(t, os.Truncate(backing, 64<<20))
	testenv.Run(t, "losetup", "--set-capacity", dev)
	back := time.Now()
	framework.WaitMetric(t, e, 15*time.Second, "randread rounds once the device is back", func(f families) bool {
		return lastSuccess(f, "raw", "randread") > float64(back.UnixNano())/1e9
	})
	if len(logLines(e, "probe recovered", "target=raw")) != 1 {
		t.Errorf("no log line saying the probe recovered")
	}
}
