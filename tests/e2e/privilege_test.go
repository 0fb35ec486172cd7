package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestUnreadableDeviceNamesTheMissingPrivilege runs the exporter as an unprivileged user
// (nobody) on a raw device it cannot read and a directory it owns. The device's probes
// fail with an error that names what is missing (the `disk` group or
// CAP_DAC_READ_SEARCH), logged once; the directory target runs untouched. Given read
// access through the disk group, or CAP_DAC_READ_SEARCH alone — the least privilege for a raw
// device — the same user probes the device.
func TestUnreadableDeviceNamesTheMissingPrivilege(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("needs a nobody user")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	diskGroup, err := user.LookupGroup("disk")
	if err != nil {
		t.Skip("needs a disk group")
	}
	diskGID, _ := strconv.Atoi(diskGroup.Gid)

	dev := rootOnlyLoopDevice(t, 64<<20)

	// Everything the unprivileged user needs to reach: a world-searchable base, a data
	// directory it owns, a config it can read.
	base, err := os.MkdirTemp("", "diskprobe-e2e-user-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Chmod(base, 0o755))
	data := filepath.Join(base, "data")
	must(t, os.Mkdir(data, 0o755))
	must(t, os.Chown(data, uid, gid))
	cfg := filepath.Join(base, "diskprobe.yml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {interval: 1s, ops: 2}
    seqread: {interval: 1s, bytes: 1MiB}
  - name: data
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    limits: {min_free: 0}
`, dev, data)), 0o644))

	e := framework.StartExporterWith(t, cfg, framework.ExporterOptions{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		// /-/ready says 503 once the device's rounds have failed with permission denied
		// (TestNotReadyWhileEveryRoundFailsWithPermissionDenied): /metrics is what is up.
		Ready: metricsAnswer,
	})
	f := framework.WaitMetric(t, e, 15*time.Second, "failed rounds on the unreadable device", func(f families) bool {
		return errs(f, "raw", "randread") >= 2 && errs(f, "raw", "seqread") >= 2 && runs(f, "data", "fsync") >= 2
	})
	for _, probe := range []string{"randread", "seqread"} {
		lines := logLines(e, `msg="probe failed"`, "target=raw", "probe="+probe)
		if len(lines) != 1 {
			t.Errorf("%s: %d error lines over %.0f failed rounds; want one", probe, len(lines), errs(f, "raw", probe))
			continue
		}
		for _, want := range []string{"permission denied", dev, "`disk`", "CAP_DAC_READ_SEARCH"} {
			if !strings.Contains(lines[0], want) {
				t.Errorf("%s: the error does not name %q: %s", probe, want, lines[0])
			}
		}
	}
	t.Logf("logged: %s", logLines(e, `msg="probe failed"`, "target=raw")[0])
	if n := errs(f, "data", "fsync"); n != 0 {
		t.Errorf("the directory target beside the unreadable device failed %.0f rounds", n)
	}
	var pst unix.Stat_t
	must(t, unix.Stat(filepath.Join(data, ".diskprobe", "fsync.probe"), &pst))
	if int(pst.Uid) != uid {
		t.Errorf("probe file owned by uid %d; want the exporter's user %d", pst.Uid, uid)
	}
	e.Signal(syscall.SIGTERM)
	<-e.Done()

	// Read access through the disk group is enough for a raw device.
	must(t, os.Chown(dev, 0, diskGID))
	must(t, os.Chmod(dev, 0o640))
	e2 := framework.StartExporterWith(t, cfg, framework.ExporterOptions{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(diskGID)}},
	})
	f2 := framework.WaitMetric(t, e2, 15*time.Second, "read rounds with the disk group", func(f families) bool {
		return lastSuccess(f, "raw", "randread") > 0 && lastSuccess(f, "raw", "seqread") > 0
	})
	if n := errs(f2, "raw", "randread") + errs(f2, "raw", "seqread"); n != 0 {
		t.Errorf("%.0f errors reading the device with the disk group", n)
	}
	e2.Signal(syscall.SIGTERM)
	<-e2.Done()

	// So is CAP_DAC_READ_SEARCH alone, on a device only root may read.
	must(t, os.Chown(dev, 0, 0))
	must(t, os.Chmod(dev, 0o600))
	e3 := framework.StartExporterWith(t, cfg, framework.ExporterOptions{
		Credential:  &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		AmbientCaps: []uintptr{unix.CAP_DAC_READ_SEARCH},
	})
	f3 := framework.WaitMetric(t, e3, 15*time.Second, "read rounds with CAP_DAC_READ_SEARCH", func(f families) bool {
		return lastSuccess(f, "raw", "randread") > 0 && lastSuccess(f, "raw", "seqread") > 0
	})
	if n := errs(f3, "raw", "randread") + errs(f3, "raw", "seqread"); n != 0 {
		t.Errorf("%.0f errors reading the device with CAP_DAC_READ_SEARCH", n)
	}
}

// readyStatus is /-/ready's status code and body.
func readyStatus(t *testing.T, e *framework.Exporter) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + e.Addr + "/-/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestNotReadyWhileEveryRoundFailsWithPermissionDenied: a target that has failed every
// round since it started with permission denied (a device the service user may not read)
// waits for an operator, not for time: /-/ready said 200 all along. It says 503 naming the
// target and the error, and 200 by itself once the operator has fixed it. A target that
// worked and then fails for good (ext4 remounts itself read-only on errors) is the disk's
// state, which the metrics report: it leaves /-/ready at 200.
func TestNotReadyWhileEveryRoundFailsWithPermissionDenied(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("needs a nobody user")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	dev := rootOnlyLoopDevice(t, 32<<20)

	// A filesystem of its own for the directory target, so it can go read-only later, on a
	// world-searchable base.
	base, err := os.MkdirTemp("", "diskprobe-e2e-ready-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Chmod(base, 0o755))
	fsDev := testenv.LoopDevice(t, 64<<20)
	testenv.Run(t, "mkfs.ext4", "-q", "-F", fsDev)
	data := filepath.Join(base, "data")
	must(t, os.Mkdir(data, 0o755))
	testenv.Run(t, "mount", "-t", "ext4", "-o", "errors=remount-ro", fsDev, data)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", data).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", data).Run()
			t.Logf("umount %s: %v %s (lazy unmount done)", data, err, out)
		}
	})
	must(t, os.Chown(data, uid, gid))
	cfg := filepath.Join(base, "diskprobe.yml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {interval: 1s, ops: 2}
  - name: data
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    limits: {min_free: 0}
`, dev, data)), 0o644))

	e := framework.StartExporterWith(t, cfg, framework.ExporterOptions{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		Ready:      metricsAnswer,
	})
	framework.WaitMetric(t, e, 15*time.Second, "failed rounds on the unreadable device, rounds on the directory", func(f families) bool {
		return errs(f, "raw", "randread") >= 2 && lastSuccess(f, "data", "fsync") > 0
	})
	code, body := readyStatus(t, e)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "target raw has failed every round since it started") || !strings.Contains(body, "permission denied") {
		t.Errorf("/-/ready while every round of raw fails with permission denied: %d %q; want 503 naming the target and the error", code, body)
	}
	t.Logf("/-/ready: %d %s", code, strings.TrimSpace(body))

	// The operator gives the service user the device: ready by itself, no reload.
	must(t, os.Chown(dev, uid, gid))
	testenv.WaitFor(t, 15*time.Second, "/-/ready 200 once the device is readable", func() bool {
		code, _ := readyStatus(t, e)
		return code == http.StatusOK
	})

	// The directory target has worked: an ext4 error remounts its filesystem read-only
	// (errors=remount-ro, as on a disk that fails), which fails its rounds for good, and
	// /-/ready stays 200.
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(fsDev), "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		t.Skipf("no ext4 error injection (%v)", err)
	}
	must(t, os.WriteFile(trigger, []byte("diskprobe test\n"), 0o200))
	failed := errs(e.MustScrape(), "data", "fsync")
	framework.WaitMetric(t, e, 15*time.Second, "failed rounds on the read-only filesystem", func(f families) bool {
		return errs(f, "data", "fsync") >= failed+2
	})
	if lines := logLines(e, "target=data", `msg="probe failed"`, "read-only file system"); len(lines) == 0 {
		t.Errorf("the read-only remount did not fail the rounds with EROFS:\n%s", e.Log.String())
	}
	if code, body := readyStatus(t, e); code != http.StatusOK {
		t.Errorf("/-/ready after a target that worked went read-only: %d %q; want 200", code, body)
	}
}

// rootOnlyLoopDevice is a loop device that only root may open (0600 root:root), as a
// disk is on a host where the exporter's user is not in the disk group; the device's
// owner and mode are put back before it is detached.
func rootOnlyLoopDevice(t *testing.T, size int64) string {
	t.Helper()
	dev := testenv.LoopDevice(t, size)
	var st unix.Stat_t
	must(t, unix.Stat(dev, &st))
	t.Cleanup(func() {
		if err := os.Chown(dev, int(st.Uid), int(st.Gid)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := os.Chmod(dev, os.FileMode(st.Mode&0o777)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	must(t, os.Chown(dev, 0, 0))
	must(t, os.Chmod(dev, 0o600))
	return dev
}
