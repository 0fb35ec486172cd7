package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestSIGTERMExitsWithSeveralMountsHung sends SIGTERM while the workers of several
// targets, each on a FUSE mount of its own, are stuck in the kernel (two or eight dead NFS
// servers). Shutdown used to share one timer among the stuck workers: the first took its
// only tick and the second waited forever, holding the scheduler's lock, so the process
// never exited. Every stuck worker is abandoned at one deadline, each says so once, and
// the process exits within 5 s (a zombie until the calls return); released, it is reaped
// with status 0.
func TestSIGTERMExitsWithSeveralMountsHung(t *testing.T) {
	testenv.RequireRoot(t)
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprintf("%d mounts", n), func(t *testing.T) { sigtermWithMountsHung(t, n) })
	}
}

func sigtermWithMountsHung(t *testing.T, n int) {
	mounts := make([]*testenv.HangFS, n)
	yaml := "targets:\n"
	for i := range mounts {
		mounts[i] = testenv.MountHangFS(t, testenv.HangFSOptions{})
		yaml += fsyncTarget(fmt.Sprintf("nfs%d", i), mounts[i].Dir, 2)
	}
	e := framework.StartExporter(t, framework.WriteConfig(t, yaml))
	// Released before the exporter's cleanup waits for it: a thread held there would keep
	// the process from being reaped.
	for _, h := range mounts {
		t.Cleanup(h.Release)
	}
	framework.WaitMetric(t, e, 30*time.Second, "a round on every target", func(f families) bool {
		for i := range mounts {
			if lastSuccess(f, fmt.Sprintf("nfs%d", i), "fsync") == 0 {
				return false
			}
		}
		return true
	})
	w := watch(e, 200*time.Millisecond, 5*time.Second)
	heldAt := time.Now()
	for _, h := range mounts {
		h.Hang()
	}
	framework.WaitMetric(t, e, 10*time.Second, "every target's operation in flight", func(f families) bool {
		for i := range mounts {
			if inflight(f, fmt.Sprintf("nfs%d", i), "fsync") < 0.3 {
				return false
			}
		}
		return true
	})
	t.Logf("every target's in-flight age over 0.3s %s after the hang", fmtDur(time.Since(heldAt)))
	time.Sleep(2 * time.Second)
	worstScrape(t, w.Stop(), fmt.Sprintf("%d mounts hung", n))
	exited, how := exitAfterSIGTERM(t, e)
	if exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM with %d mounts hung; want within 5s", fmtDur(exited), n)
	}
	if how != "zombie" {
		t.Logf("exited without a zombie phase: the kernel let go of every stuck call at the exit")
	}
	reapedOnceReleased(t, e, mounts...)
	if abandoned := logLines(e, "abandoning an I/O operation stuck in the kernel"); len(abandoned) != n {
		t.Errorf("%d workers abandoned, %d stuck:\n%s", len(abandoned), n, e.Log.String())
	}
	if len(logLines(e, "exiting with I/O still stuck in the kernel")) != 1 {
		t.Errorf("no warning that the process exits with I/O stuck")
	}
}

// reapedOnceReleased releases the mounts of an exporter that exited with calls stuck on
// them, and checks that the kernel then lets the zombie go, with exit status 0. Its log is
// complete only then: the stuck threads hold the pipe it reaches the test through open.
func reapedOnceReleased(t *testing.T, e *framework.Exporter, mounts ...*testenv.HangFS) {
	t.Helper()
	pid := e.Pid()
	releasedAt := time.Now()
	for _, h := range mounts {
		h.Release()
	}
	select {
	case <-e.Done():
		t.Logf("reaped %s after the release", fmtDur(time.Since(releasedAt)))
	case <-time.After(10 * time.Second):
		t.Fatalf("process %d not reaped 10s after the release (state %s)", pid, testenv.ProcessState(pid))
	}
	if ws, ok := e.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && (!ws.Exited() || ws.ExitStatus() != 0) {
		t.Errorf("exit status after SIGTERM: %v; want a clean exit 0", e.Cmd.ProcessState)
	}
}

// TestReloadUnderWayAtSIGTERMIsNotApplied sends SIGHUP with a configuration that adds a
// target on a hung mount (its path is asked for 1 s) and another on a healthy directory,
// then SIGTERM while a worker is stuck (shutdown waits 3 s for it). The reload used to
// apply once shutdown let go of the scheduler: it started the new targets' runners, and
// logged "configuration reloaded", in a process on its way out.
func TestReloadUnderWayAtSIGTERMIsNotApplied(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	late := filepath.Join(h.Dir, "late")
	must(t, os.Mkdir(late, 0o755))
	fresh := t.TempDir()
	cfg := framework.WriteConfig(t, "targets:\n"+fsyncTarget("hung", h.Dir, 2))
	e := startOnHangFS(t, h, cfg, framework.ExporterOptions{})
	framework.WaitMetric(t, e, 15*time.Second, "a round on the target", func(f families) bool { return runs(f, "hung", "fsync") >= 1 })
	h.Hang()
	framework.WaitMetric(t, e, 10*time.Second, "the target's operation in flight", func(f families) bool { return inflight(f, "hung", "fsync") > 0.3 })
	writeFile(t, cfg, "targets:\n"+fsyncTarget("hung", h.Dir, 2)+fsyncTarget("late", late, 2)+fsyncTarget("fresh", fresh, 2))
	e.Signal(syscall.SIGHUP)
	time.Sleep(100 * time.Millisecond)
	if exited, _ := exitAfterSIGTERM(t, e); exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM during a reload; want within 5s", fmtDur(exited))
	}
	reapedOnceReleased(t, e, h)
	log := e.Log.String()
	i := strings.Index(log, `msg="shutting down"`)
	if i < 0 {
		t.Fatalf("no shutdown logged:\n%s", log)
	}
	for _, applied := range []string{"configuration reloaded", "target=fresh", "target=late"} {
		if strings.Contains(log[i:], applied) {
			t.Errorf("the reload under way was applied after SIGTERM (%q logged after it):\n%s", applied, log[i:])
		}
	}
	if entries, err := os.ReadDir(fresh); err != nil || len(entries) != 0 {
		t.Errorf("the reload under way wrote into the new target's directory after SIGTERM: %v %v", entries, err)
	}
}
