package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// fsyncShare is what a rule reads between two scrapes: the share of the fsync probe's
// latency (its write and fdatasync calls) that its I/O thread spent waiting for a CPU,
// and the mean latency of one write+fdatasync.
func fsyncShare(t *testing.T, from, to families, target string) (share float64, perOp time.Duration, ops uint64) {
	t.Helper()
	sync := histogramOf(to, "diskprobe_fdatasync_duration_seconds", target).sub(histogramOf(from, "diskprobe_fdatasync_duration_seconds", target))
	write := histogramOf(to, "diskprobe_write_duration_seconds", target).sub(histogramOf(from, "diskprobe_write_duration_seconds", target))
	wait := value(to, "diskprobe_probe_cpu_wait_seconds_total", "target", target, "probe", "fsync") -
		value(from, "diskprobe_probe_cpu_wait_seconds_total", "target", target, "probe", "fsync")
	if sync.count == 0 {
		t.Fatal("no fdatasync between the two scrapes")
	}
	latency := sync.sum + write.sum
	return wait / latency, time.Duration(latency / float64(sync.count) * float64(time.Second)), sync.count
}

// oneFsyncTarget is one fsync-only target on dir, a round of ops every second, let through
// at once (an iops limit far above them).
func oneFsyncTarget(t *testing.T, dir string, ops int) string {
	return framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: disk
    path: %s
    fsync: {interval: 1s, ops: %d, block_size: 2300, file_size: 4MiB}
    limits: {iops: 10000, timeout: 30s, min_free: 0}
`, dir, ops))
}

// waitRounds waits for n more fsync rounds of the target and returns the scrape after them.
func waitRounds(t *testing.T, e *framework.Exporter, from families, n float64) families {
	t.Helper()
	r0 := runs(from, "disk", "fsync")
	return framework.WaitMetric(t, e, 90*time.Second, fmt.Sprintf("%.0f fsync rounds", n), func(f families) bool {
		return runs(f, "disk", "fsync") >= r0+n
	})
}

// TestStarvedCPUsShowAsCPUWaitNotAsTheDisk: on a node whose CPUs are saturated the
// probe's latency grows while the disk is idle, and a rule that reads the latency alone
// blames the disk. The exporter kept off the CPUs beside an idle RAM-backed disk: most of
// the fsync probe's latency must be its thread waiting for a CPU.
func TestStarvedCPUsShowAsCPUWaitNotAsTheDisk(t *testing.T) {
	testenv.RequireRoot(t)
	_, dir := testenv.RAMLoopExt4(t, 64<<20)
	e := framework.StartExporter(t, oneFsyncTarget(t, dir, 200))
	first := framework.WaitMetric(t, e, 30*time.Second, "the CPU wait of the first fsync round", func(f families) bool {
		_, ok := framework.Value(f, "diskprobe_probe_cpu_wait_seconds_total", map[string]string{"target": "disk", "probe": "fsync"})
		return ok && runs(f, "disk", "fsync") >= 1
	})
	quiet := waitRounds(t, e, first, 3)
	share, perOp, ops := fsyncShare(t, first, quiet, "disk")
	t.Logf("before the quota: %d write+fdatasync, mean %v, CPU wait %.0f %% of it", ops, perOp, share*100)

	// The prober kept off the CPUs: the exporter in a cpu cgroup allowed 1 ms of CPU every
	// 100 ms (CFS bandwidth control, what a pod's CPU limit sets), while each round asks for
	// several: 200 write+fdatasync at once. Its thread is runnable and waits, throttled, as it
	// waits behind busy processes on a saturated node. Busy processes alone did not show it
	// reliably: with the exporter at 10 cpu shares beside eight of them on two CPUs the
	// scheduler still let a thread waking from I/O in soon, and one CI run saw 99, 7, 8, 48,
	// 18 % in five rounds; a quota holds whatever else the machine runs.
	cg := testenv.CPUQuota(t, time.Millisecond, 100*time.Millisecond)
	cg.Add(e.Pid())
	// Round by round: one unmeasured round (its schedstat reading failed, so it adds
	// nothing; seen once in seven runs here as a share of 0 over three rounds) must not
	// decide the judgement, so the median of five rounds' shares does.
	from := waitRounds(t, e, e.MustScrape(), 1)
	var shares []float64
	to := from
	for range 5 {
		next := waitRounds(t, e, to, 1)
		share, perOp, ops := fsyncShare(t, to, next, "disk")
		t.Logf("with the exporter allowed 1 ms of CPU in 100 ms: %d write+fdatasync, mean %v, CPU wait %.0f %% of it", ops, perOp, share*100)
		shares = append(shares, share)
		to = next
	}
	slices.Sort(shares)
	// Most of it, as the rules read it: DiskprobeHostCPUStarved fires above one half.
	if median := shares[len(shares)/2]; median <= 0.5 {
		t.Errorf("CPU wait is %.0f %% of the fsync probe's latency (median of 5 rounds) kept off the CPUs beside an idle disk; want most of it (> 50 %%)", median*100)
	}
	if n := errs(to, "disk", "fsync"); n != 0 {
		t.Errorf("%.0f failed rounds", n)
	}
}

// TestThrottledDiskShowsAsLatencyNotCPUWait: the other side of the same judgement. A disk
// as slow as a failing SSD (a blkio throttle: 20 writes per second, about 100 ms per
// fdatasync) with nothing added on the CPUs: the latency is large and the CPU wait a
// small part of it, however busy the shared machine is otherwise.
func TestThrottledDiskShowsAsLatencyNotCPUWait(t *testing.T) {
	testenv.RequireRoot(t)
	dev, dir := testenv.RAMLoopExt4(t, 64<<20)
	cg := testenv.ThrottleWrites(t, dev, 20)
	e := framework.StartExporter(t, oneFsyncTarget(t, dir, 5))
	cg.Add(e.Pid())
	from := waitRounds(t, e, e.MustScrape(), 1) // the rounds from here on are throttled
	to := waitRounds(t, e, from, 3)
	share, perOp, ops := fsyncShare(t, from, to, "disk")
	t.Logf("throttled to 20 writes/s: %d write+fdatasync, mean %v, CPU wait %.1f %% of it", ops, perOp, share*100)
	if perOp < 20*time.Millisecond {
		t.Fatalf("a write+fdatasync took %v on average; the throttle did not slow the disk", perOp)
	}
	if share >= 0.2 {
		t.Errorf("CPU wait is %.0f %% of the fsync probe's latency on a throttled disk; want a small part (< 20 %%)", share*100)
	}
}
