package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestManyTargetsHealthyOnesNotHeldByHungOrSlowOnes runs 64 targets: 4 on a filesystem
// that gets frozen, 4 on a disk throttled to a few writes per second, 56 healthy. Hung and
// slow disks must cost the healthy targets nothing: they go on probing without errors,
// none of them waits behind the frozen filesystem (which would show as a gap as long as
// the freeze), and /metrics keeps answering. make bench also judges how precisely their
// rounds kept the interval, against the minutes before the trouble (benchmode_test.go).
func TestManyTargetsHealthyOnesNotHeldByHungOrSlowOnes(t *testing.T) {
	testenv.RequireRoot(t)
	const (
		frozenN, slowN, healthyN = 4, 4, 56
		interval                 = 2 * time.Second
		phase                    = 16 * time.Second
	)
	_, frozenMnt := testenv.LoopExt4(t, 64<<20)
	slowDev, slowMnt := testenv.LoopExt4(t, 64<<20)
	cg := testenv.ThrottleWrites(t, slowDev, 10)
	healthyBase := t.TempDir()

	frozen, slow, healthy := targetNames("frozen", frozenN), targetNames("slow", slowN), targetNames("healthy", healthyN)
	cfg := "targets:\n"
	add := func(names []string, base string) {
		for _, name := range names {
			dir := filepath.Join(base, name)
			must(t, os.Mkdir(dir, 0o755))
			cfg += fmt.Sprintf(`  - name: %s
    path: %s
    fsync: {interval: %s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    limits: {timeout: 5s, min_free: 0}
`, name, dir, interval)
		}
	}
	add(frozen, frozenMnt)
	add(slow, slowMnt)
	add(healthy, healthyBase)
	e := framework.StartExporter(t, framework.WriteConfig(t, cfg))
	cg.Add(e.Pid())
	all := append(append(append([]string{}, frozen...), slow...), healthy...)
	framework.WaitMetric(t, e, 30*time.Second, "rounds on all 64 targets", func(f families) bool {
		for _, name := range all {
			if runs(f, name, "fsync") < 1 {
				return false
			}
		}
		return true
	})

	// Before: everything running. Then 4 frozen and 4 throttled beside the healthy ones.
	w := watch(e, 400*time.Millisecond, 5*time.Second)
	calmStart := time.Now()
	time.Sleep(phase)
	troubleStart := time.Now()
	thaw := testenv.Freeze(t, frozenMnt)
	time.Sleep(phase)
	troubleEnd := time.Now()
	thaw()
	obs := w.Stop()
	alive(t, e)

	calmObs, troubleObs := between(obs, calmStart, troubleStart), between(obs, troubleStart, troubleEnd)
	var worst time.Duration
	for _, o := range troubleObs {
		if o.err != nil {
			t.Errorf("scrape failed with hung and slow targets: %v", o.err)
		}
		worst = max(worst, o.latency)
	}
	calm := measureSchedule(calmObs, healthy, []string{"fsync"}, interval)
	trouble := measureSchedule(troubleObs, healthy, []string{"fsync"}, interval)
	t.Logf("healthy rounds, before: %s", calm)
	t.Logf("healthy rounds, with 4 hung and 4 slow targets: %s; worst scrape %s", trouble, fmtDur(worst))
	first, last := troubleObs[0].f, troubleObs[len(troubleObs)-1].f
	var skips float64
	for _, name := range healthy {
		if n := errs(last, name, "fsync"); n != 0 {
			t.Errorf("healthy target %s: %.0f errors beside hung and slow targets", name, n)
		}
		// Half the rounds due and no gap of half the freeze hold on any machine; a target
		// held behind the frozen filesystem would make none for the whole phase.
		if n, due := runs(last, name, "fsync")-runs(first, name, "fsync"), phase.Seconds()/interval.Seconds(); n < due/2 {
			t.Errorf("healthy target %s: %.0f rounds in %s beside hung and slow targets; want at least half the %.0f due", name, n, phase, due)
		}
		if g := percentile(roundGaps(troubleObs, name, "fsync"), 1); g > phase/2 {
			t.Errorf("healthy target %s: %s between two rounds beside hung and slow targets (interval %s)", name, g.Round(time.Millisecond), interval)
		}
		skips += skipped(last, name, "fsync", "inflight") - skipped(first, name, "fsync", "inflight")
	}
	reportTimingGoals(t, "Healthy targets beside hung and slow ones", fmt.Sprintf(
		"56 healthy targets (fsync every %s on the host's disk) beside 4 on a frozen filesystem and 4 on a loop device "+
			"throttled to 10 writes/s, for %s, against the %s before the trouble (TestManyTargetsHealthyOnesNotHeldByHungOrSlowOnes).",
		interval, phase, phase), []timingGoal{
		{"healthy round intervals outside ±20 %", fmt.Sprintf("%.1f %% with the trouble, %.1f %% before (%d intervals)", 100*trouble.share(), 100*calm.share(), len(trouble.gaps)),
			"≤ max(2 %, 2× before)", len(trouble.few) == 0 && trouble.share() <= max(0.02, 2*calm.share())},
		{"healthy rounds skipped (previous one still running)", fmt.Sprintf("%.0f", skips), "0", skips == 0},
		{"worst scrape with the trouble", fmtDur(worst), "< 1s", worst < time.Second},
	})

	// The trouble was real: the frozen targets stuck, the slow ones over etcd's 10 ms.
	stuck := 0
	for _, name := range frozen {
		if skipped(last, name, "fsync", "inflight") > skipped(first, name, "fsync", "inflight") {
			stuck++
		}
	}
	if stuck != frozenN {
		t.Errorf("only %d of %d targets on the frozen filesystem skipped rounds", stuck, frozenN)
	}
	var slowHist histogram
	for i, name := range slow {
		h := histogramOf(last, "diskprobe_fdatasync_duration_seconds", name).sub(histogramOf(calmObs[0].f, "diskprobe_fdatasync_duration_seconds", name))
		if i == 0 {
			slowHist = h
		} else {
			slowHist = slowHist.add(h)
		}
	}
	t.Logf("throttled targets: %d fdatasyncs, p99 ≈ %.0fms", slowHist.count, slowHist.quantile(0.99)*1000)
	if slowHist.count == 0 || float64(slowHist.buckets[0.01]) >= 0.99*float64(slowHist.count) {
		t.Errorf("the throttled targets were not slow: %d of %d fdatasyncs under 10ms", slowHist.buckets[0.01], slowHist.count)
	}
}
