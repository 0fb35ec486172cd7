package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestSlowDiskPushesFdatasyncP99OverEtcdTarget throttles a loop device to a few write
// operations per second (a failing SSD, from the exporter's side) and moves the exporter
// into the throttled cgroup. Within two rounds the fdatasync p99, read from the classic
// buckets as a dashboard would, must be over etcd's 10 ms target, and nothing else breaks:
// no errors, the unthrottled target next to it unaffected.
func TestSlowDiskPushesFdatasyncP99OverEtcdTarget(t *testing.T) {
	testenv.RequireRoot(t)
	dev, slowDir := testenv.LoopExt4(t, 128<<20)
	steadyDir := t.TempDir()
	cg := testenv.ThrottleWrites(t, dev, 10)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: slow
    path: %s
    fsync: {interval: 2s, ops: 5, block_size: 2300, file_size: 4MiB}
    limits: {timeout: 30s, min_free: 0}
  - name: steady
    path: %s
    fsync: {interval: 2s, ops: 5, block_size: 2300, file_size: 4MiB}
    limits: {timeout: 30s, min_free: 0}
`, slowDir, steadyDir))
	e := framework.StartExporter(t, cfg)
	cg.Add(e.Pid())
	start := e.MustScrape()
	h0 := histogramOf(start, "diskprobe_fdatasync_duration_seconds", "slow")
	r0 := runs(start, "slow", "fsync")

	end := framework.WaitMetric(t, e, 30*time.Second, "two fsync rounds after throttling", func(f families) bool {
		return runs(f, "slow", "fsync") >= r0+2
	})
	h := histogramOf(end, "diskprobe_fdatasync_duration_seconds", "slow").sub(h0)
	if h.count == 0 {
		t.Fatal("no fdatasync samples after throttling")
	}
	under := h.buckets[0.01]
	t.Logf("throttled: %d fdatasyncs, %d under 10ms, p99 ≈ %.1fms (classic buckets)", h.count, under, h.quantile(0.99)*1000)
	// p99 > 10 ms exactly when fewer than 99 % of the samples are in the le="0.01" bucket.
	if float64(under) >= 0.99*float64(h.count) {
		t.Errorf("fdatasync p99 not over 10ms after two rounds on a disk throttled to 10 writes/s: %d of %d under 10ms", under, h.count)
	}

	steady := histogramOf(end, "diskprobe_fdatasync_duration_seconds", "steady").sub(histogramOf(start, "diskprobe_fdatasync_duration_seconds", "steady"))
	t.Logf("unthrottled target beside it: %d fdatasyncs, p99 ≈ %.1fms", steady.count, steady.quantile(0.99)*1000)
	if steady.count == 0 {
		t.Errorf("the unthrottled target stopped probing")
	}
	for _, target := range []string{"slow", "steady"} {
		if n := errs(end, target, "fsync"); n != 0 {
			t.Errorf("target %s: %.0f errors; a slow disk is not an error", target, n)
		}
	}
	alive(t, e)
}
