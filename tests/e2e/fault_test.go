package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestFailedFdatasyncIsObservedAndStartsAFreshFile makes one fdatasync of the fsync probe
// fail with EIO (a FUSE filesystem answering it, as a failing disk does). etcd observes
// wal_fsync before it returns such an error and treats it as fatal for the file: the
// failed call must be in diskprobe_fdatasync_duration_seconds, the round counted as an
// error, and the next round must write a new probe file, not the one whose pages the
// kernel may already have dropped.
func TestFailedFdatasyncIsObservedAndStartsAFreshFile(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	// One operation a round: every round, failed or not, then observes one fdatasync.
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: eio
    path: %s
    fsync: {interval: 1s, ops: 1, block_size: 4KiB, file_size: 1MiB}
    limits: {timeout: 10s, min_free: 0}
`, h.Dir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 20*time.Second, "two fsync rounds", func(f families) bool { return runs(f, "eio", "fsync") >= 2 })

	// Hold the file open, so that its inode cannot be given to the next file.
	old, err := os.Open(filepath.Join(h.Backing, ".diskprobe", "fsync.probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var before unix.Stat_t
	must(t, unix.Fstat(int(old.Fd()), &before))

	h.Fail(unix.EIO, 1, testenv.OpFsync)
	framework.WaitMetric(t, e, 20*time.Second, "the failed fdatasync counted as an error", func(f families) bool { return errs(f, "eio", "fsync") >= 1 })
	failed := time.Now()
	f := framework.WaitMetric(t, e, 20*time.Second, "a round after the failure, and one fdatasync observed for every round, the failed one too",
		func(f families) bool {
			return lastSuccess(f, "eio", "fsync") > float64(failed.UnixNano())/1e9 &&
				histogramOf(f, "diskprobe_fdatasync_duration_seconds", "eio").count == uint64(runs(f, "eio", "fsync"))
		})
	if n := errs(f, "eio", "fsync"); n != 1 {
		t.Errorf("%.0f fsync errors, want 1", n)
	}
	if lines := logLines(e, `msg="probe failed"`, "input/output error"); len(lines) != 1 {
		t.Errorf("%d log lines for the failed fdatasync, want 1: %v", len(lines), lines)
	} else {
		t.Logf("logged: %s", lines[0])
	}

	var after, held unix.Stat_t
	must(t, unix.Stat(filepath.Join(h.Backing, ".diskprobe", "fsync.probe"), &after))
	must(t, unix.Fstat(int(old.Fd()), &held))
	if after.Ino == before.Ino || held.Nlink != 0 {
		t.Errorf("the rounds after a failed fdatasync went on in the same file (inode %d, now %d; the old one has %d links)", before.Ino, after.Ino, held.Nlink)
	}
	if h := probeHeader(t, filepath.Join(h.Dir, ".diskprobe", "fsync.probe")); !strings.HasPrefix(h, "diskprobe_exporter probe file") {
		t.Errorf("the new file has no header: %q", h)
	}
}

// TestInterruptedCallsAreNotProbeErrors has a FUSE filesystem answer EINTR, as one that
// honours interrupts does when the Go runtime's preemption signal lands on the calling
// thread, to the calls of every probe: each must be retried, with no error counted.
func TestInterruptedCallsAreNotProbeErrors(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: eintr
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    randread: {interval: 1s, ops: 2, file_size: 4MiB}
    seqread: {interval: 1s, bytes: 1MiB, block_size: 256KiB}
    seqwrite: {interval: 1s, bytes: 1MiB, block_size: 256KiB}
    commit: {interval: 1s, ops: 2, pages: 3, file_size: 2MiB}
    limits: {timeout: 10s, min_free: 1MiB}
`, h.Dir))
	probes := []string{"fsync", "randread", "seqread", "seqwrite", "commit"}
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 30*time.Second, "a round of every probe", func(f families) bool {
		for _, p := range probes {
			if lastSuccess(f, "eintr", p) == 0 {
				return false
			}
		}
		return true
	})
	ops := []string{testenv.OpGetattr, testenv.OpStatfs, testenv.OpRead, testenv.OpWrite, testenv.OpFsync} // what each round asks
	const eintrs = 5
	h.Fail(unix.EINTR, eintrs, ops...)
	testenv.WaitFor(t, 20*time.Second, "every injected EINTR answered", func() bool {
		for _, op := range ops {
			if h.Failed(op) < eintrs {
				return false
			}
		}
		return true
	})
	answered := time.Now()
	f := framework.WaitMetric(t, e, 20*time.Second, "a round of every probe after the EINTRs", func(f families) bool {
		for _, p := range probes {
			if lastSuccess(f, "eintr", p) < float64(answered.UnixNano())/1e9 {
				return false
			}
		}
		return true
	})
	for _, p := range probes {
		if n := errs(f, "eintr", p); n != 0 {
			t.Errorf("%.0f %s errors from interrupted calls", n, p)
		}
	}
	if lines := logLines(e, "interrupted system call"); len(lines) != 0 {
		t.Errorf("logged: %v", lines)
	}
}
