package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// hungFreeze is how long the filesystem stays frozen: the 30 s, which keeps the
// whole test under a minute.
const hungFreeze = 30 * time.Second

// TestMetricsStayResponsiveWhileFilesystemFrozen freezes the filesystem under a running
// fsync probe. The write is stuck in the kernel and nothing in Go can cancel it: the
// exporter must keep answering /metrics, report the growing age of the stuck operation,
// count the rounds it skips, not pile up goroutines, and probe again by itself after the
// thaw.
func TestMetricsStayResponsiveWhileFilesystemFrozen(t *testing.T) {
	testenv.RequireRoot(t)
	_, frozenDir := testenv.LoopExt4(t, 128<<20)
	steadyDir := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: frozen
    path: %s
    fsync: {interval: 1s, ops: 3, block_size: 4KiB, file_size: 4MiB}
    limits: {timeout: 5s, min_free: 0}
  - name: steady
    path: %s
    fsync: {interval: 1s, ops: 3, block_size: 4KiB, file_size: 4MiB}
    limits: {timeout: 5s, min_free: 0}
`, frozenDir, steadyDir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "two fsync rounds on the frozen-to-be target", func(f families) bool {
		return runs(f, "frozen", "fsync") >= 2 && runs(f, "steady", "fsync") >= 2
	})

	w := watch(e, 200*time.Millisecond, 5*time.Second)
	time.Sleep(2 * time.Second) // a baseline of goroutines with the watcher's connection open
	freezeAt := time.Now()
	thaw := testenv.Freeze(t, frozenDir)
	time.Sleep(hungFreeze)
	thawAt := time.Now()
	thaw()
	recovered := framework.WaitMetric(t, e, 15*time.Second, "an fsync round that ends after the thaw", func(f families) bool {
		return lastSuccess(f, "frozen", "fsync") > float64(thawAt.UnixNano())/1e9 && inflight(f, "frozen", "fsync") == 0
	})
	recoveredAt := time.Now()
	time.Sleep(3 * time.Second)
	obs := w.Stop()
	alive(t, e)

	before := between(obs, freezeAt.Add(-2*time.Second), freezeAt)
	during := between(obs, freezeAt, thawAt)
	after := between(obs, recoveredAt.Add(time.Second), time.Now())
	if len(before) == 0 || len(during) < int(hungFreeze/(400*time.Millisecond)) || len(after) == 0 {
		t.Fatalf("too few scrapes: %d before, %d while frozen, %d after", len(before), len(during), len(after))
	}

	// /metrics answers within 1 s all along.
	var worst time.Duration
	for _, o := range during {
		if o.err != nil {
			t.Errorf("scrape %.1fs into the freeze failed: %v", o.at.Sub(freezeAt).Seconds(), o.err)
			continue
		}
		worst = max(worst, o.latency)
	}
	t.Logf("worst scrape latency while frozen: %s over %d scrapes", fmtDur(worst), len(during))
	if worst > time.Second {
		t.Errorf("a scrape took %s while the filesystem was frozen; /metrics must answer within 1s", worst)
	}

	// The stuck operation's age is reported, and grows past 10 s.
	first, last := during[0].f, during[len(during)-1].f
	for _, o := range during {
		if o.err == nil {
			first = o.f
			break
		}
	}
	ageEnd := inflight(last, "frozen", "fsync")
	t.Logf("in-flight age: %.1fs at the start of the freeze, %.1fs at its end", inflight(first, "frozen", "fsync"), ageEnd)
	if ageEnd < 10 || ageEnd < hungFreeze.Seconds()-5 {
		t.Errorf("diskprobe_probe_inflight_seconds was %.1f after %s frozen; want it to grow with the freeze", ageEnd, hungFreeze)
	}
	if ageMid := inflight(during[len(during)/2].f, "frozen", "fsync"); ageMid <= 0 || ageMid >= ageEnd {
		t.Errorf("in-flight age not growing: %.1fs mid-freeze, %.1fs at the end", ageMid, ageEnd)
	}
	if inflight(last, "steady", "fsync") > 1 {
		t.Errorf("the steady target reports a stuck operation: %.1fs", inflight(last, "steady", "fsync"))
	}

	// Rounds are skipped and counted: about one per interval.
	skips := skipped(last, "frozen", "fsync", "inflight") - skipped(before[len(before)-1].f, "frozen", "fsync", "inflight")
	t.Logf("rounds skipped while frozen: %.0f in %s", skips, hungFreeze)
	if skips < hungFreeze.Seconds()*0.6 {
		t.Errorf("only %.0f rounds counted as skipped (reason inflight) in %s with a 1s interval", skips, hungFreeze)
	}
	// The stuck operation is one error, logged once, not one per skipped round.
	if n := len(logLines(e, "I/O operation stuck in the kernel", "target=frozen")); n != 1 {
		t.Errorf("%d log lines about the stuck operation; want exactly one", n)
	}
	if d := errs(last, "frozen", "fsync") - errs(before[len(before)-1].f, "frozen", "fsync"); d != 1 {
		t.Errorf("the stuck operation counted %.0f errors; want 1 (past limits.timeout, once)", d)
	}
	// The other target keeps its schedule.
	if d := runs(last, "steady", "fsync") - runs(first, "steady", "fsync"); d < hungFreeze.Seconds()*0.7 {
		t.Errorf("the steady target ran only %.0f rounds during the %s freeze", d, hungFreeze)
	}

	// No goroutine growth: as many at the end of the freeze as at its start and before it.
	gBefore := value(before[len(before)-1].f, "go_goroutines")
	gEarly := value(between(during, freezeAt.Add(3*time.Second), thawAt)[0].f, "go_goroutines")
	gMax := 0.0
	for _, o := range during {
		if o.err == nil {
			gMax = max(gMax, value(o.f, "go_goroutines"))
		}
	}
	gLate := value(last, "go_goroutines")
	gAfter := value(after[len(after)-1].f, "go_goroutines")
	t.Logf("go_goroutines: %.0f before, %.0f early in the freeze, %.0f at its end (max %.0f), %.0f after recovery", gBefore, gEarly, gLate, gMax, gAfter)
	if gLate > gEarly+3 || gMax > gBefore+5 || gAfter > gBefore+3 {
		t.Errorf("goroutines grew while the filesystem was frozen: %.0f before, %.0f early, %.0f late, max %.0f, %.0f after", gBefore, gEarly, gLate, gMax, gAfter)
	}

	// Recovery without a restart.
	if errs(recovered, "frozen", "fsync") != errs(last, "frozen", "fsync") {
		t.Errorf("errors after the thaw: %.0f → %.0f", errs(last, "frozen", "fsync"), errs(recovered, "frozen", "fsync"))
	}
	if len(logLines(e, "stuck I/O operation returned", "target=frozen")) != 1 {
		t.Errorf("no single log line saying the stuck operation returned")
	}
	t.Logf("recovered %.1fs after the thaw", lastSuccess(recovered, "frozen", "fsync")-float64(thawAt.UnixNano())/1e9)
}

// TestSIGTERMExitsWhileIOIsStuck sends SIGTERM while a write is stuck on a frozen
// filesystem. The process must exit within 5 s; the kernel may keep it as a zombie (its
// stuck thread in D state) until the I/O returns, which is all an init system can see.
func TestSIGTERMExitsWhileIOIsStuck(t *testing.T) {
	testenv.RequireRoot(t)
	_, dir := testenv.LoopExt4(t, 64<<20)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: frozen
    path: %s
    fsync: {interval: 1s, ops: 3, block_size: 4KiB, file_size: 4MiB}
    limits: {timeout: 5s, min_free: 0}
`, dir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "an fsync round", func(f families) bool { return runs(f, "frozen", "fsync") >= 1 })
	thaw := testenv.Freeze(t, dir)
	framework.WaitMetric(t, e, 10*time.Second, "a write stuck on the frozen filesystem", func(f families) bool {
		return inflight(f, "frozen", "fsync") > 1
	})
	pid := e.Pid()
	exited, _ := exitAfterSIGTERM(t, e)
	if exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM; want within 5s even with I/O stuck", exited)
	}
	if lines := logLines(e, "I/O still stuck in the kernel"); len(lines) == 0 {
		t.Errorf("no log line warning that the process exits with I/O stuck")
	} else {
		t.Logf("logged: %s", strings.Join(append(logLines(e, "abandoning"), lines...), "\n"))
	}

	// Once the I/O returns, the kernel lets the zombie go.
	thaw()
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("process %d not reaped 10s after the thaw (state %s)", pid, testenv.ProcessState(pid))
	}
	if ws, ok := e.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && (!ws.Exited() || ws.ExitStatus() != 0) {
		t.Errorf("exit status after SIGTERM: %v; want a clean exit 0", e.Cmd.ProcessState)
	}
}

// exitAfterSIGTERM sends SIGTERM and measures how long the process takes to exit: to be
// reaped, or to become a zombie whose thread the kernel still holds in a stuck I/O (all
// an init system can see). It fails the test when the process is still running 10s later.
func exitAfterSIGTERM(t *testing.T, e *framework.Exporter) (time.Duration, string) {
	t.Helper()
	pid := e.Pid()
	sent := time.Now()
	e.Signal(syscall.SIGTERM)
	for time.Since(sent) < 10*time.Second {
		how := ""
		select {
		case <-e.Done():
			how = "reaped"
		default:
			if testenv.ProcessState(pid) == "Z" {
				how = "zombie"
			}
		}
		if how != "" {
			exited := time.Since(sent)
			t.Logf("SIGTERM to exit: %s (%s)", fmtDur(exited), how)
			return exited, how
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("still running (state %s) 10s after SIGTERM", testenv.ProcessState(pid))
	return 0, ""
}

// TestFrozenWhileCuttingANewProbeFileIsReportedStuck freezes the filesystem when the fsync
// probe is about to start a new file (every round here: the file holds one block), so
// the probe hangs in mkdir/create rather than in a write. That hang must show just the
// same: its age in diskprobe_probe_inflight_seconds, one "stuck" error and log line past
// limits.timeout, and recovery after the thaw.
func TestFrozenWhileCuttingANewProbeFileIsReportedStuck(t *testing.T) {
	testenv.RequireRoot(t)
	_, dir := testenv.LoopExt4(t, 64<<20)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: frozen
    path: %s
    fsync: {interval: 1s, ops: 1, block_size: 4KiB, file_size: 8KiB}
    limits: {timeout: 3s, min_free: 0}
`, dir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "fsync rounds", func(f families) bool { return runs(f, "frozen", "fsync") >= 2 })
	thaw := testenv.Freeze(t, dir)
	f := framework.WaitMetric(t, e, 15*time.Second, "the stuck file creation reported past limits.timeout", func(f families) bool {
		return inflight(f, "frozen", "fsync") > 4 && errs(f, "frozen", "fsync") >= 1
	})
	t.Logf("in-flight age %.1fs, %.0f rounds skipped", inflight(f, "frozen", "fsync"), skipped(f, "frozen", "fsync", "inflight"))
	if n := len(logLines(e, "I/O operation stuck in the kernel", "target=frozen")); n != 1 {
		t.Errorf("%d log lines about the stuck operation; want one", n)
	}
	thaw()
	thawed := time.Now()
	framework.WaitMetric(t, e, 15*time.Second, "an fsync round after the thaw", func(f families) bool {
		return lastSuccess(f, "frozen", "fsync") > float64(thawed.UnixNano())/1e9 && inflight(f, "frozen", "fsync") == 0
	})
}

func TestFilesystemAlreadyFrozenAtStartIsReportedStuck(t *testing.T) {
	testenv.RequireRoot(t)
	_, dir := testenv.LoopExt4(t, 64<<20)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: frozen
    path: %s
    fsync: {interval: 1s, ops: 1, file_size: 8MiB}
    limits: {timeout: 3s, min_free: 0}
`, dir))
	// Creating <path>/.diskprobe is the first thing that hangs.
	thaw := testenv.Freeze(t, dir)
	e := framework.StartExporter(t, cfg)
	f := framework.WaitMetric(t, e, 15*time.Second, "the stuck probe directory creation reported past limits.timeout", func(f families) bool {
		return inflight(f, "frozen", "fsync") > 4 && errs(f, "frozen", "fsync") >= 1
	})
	t.Logf("in-flight age %.1fs, %.0f rounds skipped", inflight(f, "frozen", "fsync"), skipped(f, "frozen", "fsync", "inflight"))
	thaw()
	thawed := time.Now()
	framework.WaitMetric(t, e, 15*time.Second, "an fsync round after the thaw", func(f families) bool {
		return lastSuccess(f, "frozen", "fsync") > float64(thawed.UnixNano())/1e9 && inflight(f, "frozen", "fsync") == 0
	})
}
