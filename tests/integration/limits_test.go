package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The bytes/s bucket holds max(largest block, bandwidth/10); with 1 MiB blocks and
// 8 MiB/s that is one block.
const (
	limitBandwidth = 8 * mib
	limitBurst     = 1 * mib
	block          = 1 * mib
)

// checkBandwidth checks sector counts sampled from /proc/diskstats against a token bucket
// of limitBandwidth: total bytes must take at least (total - burst)/rate, and no window of
// a second or more may carry more than rate × window + burst (+ one block for a read
// issued just before the window that completed inside it).
func checkBandwidth(t *testing.T, what string, points []statsPoint, sectors func(device.Stats) uint64, total uint64) {
	t.Helper()
	span, ok := activeSpan(points, sectors, total)
	if !ok {
		t.Fatalf("%s: /proc/diskstats never counted %d MiB", what, total/mib)
	}
	// A bucket that starts full lets the first burst through at once.
	minSpan := time.Duration(float64(total-limitBurst) / limitBandwidth * float64(time.Second))
	t.Logf("%s: %d MiB took %v in /proc/diskstats, ± one 50 ms sample (limit %d MiB/s: ≥ %v)", what, total/mib, span.Round(time.Millisecond), limitBandwidth/mib, minSpan.Round(time.Millisecond))
	if span < minSpan {
		t.Errorf("%s: %d MiB went through in %v, faster than the %d MiB/s limit allows (≥ %v)", what, total/mib, span, limitBandwidth/mib, minSpan)
	}
	moved := float64(sectors(points[len(points)-1].Stats)-sectors(points[0].Stats)) * 512
	t.Logf("%s: %.2f MiB counted in all", what, moved/mib)
	excess, at := maxExcess(points, sectors, limitBandwidth, time.Second)
	t.Logf("%s: largest excess over rate × window: %.2f MiB (%s)", what, excess/mib, at)
	if excess > limitBurst+block {
		t.Errorf("%s: %.2f MiB over the %d MiB/s limit in one window (%s); a token bucket allows one burst of %d MiB",
			what, excess/mib, limitBandwidth/mib, at, limitBurst/mib)
	}
}

func TestSeqreadHeldToBandwidthLimit(t *testing.T) {
	dev := testenv.LoopDevice(t, 64*mib)
	testenv.FillRandom(t, dev, 64*mib)
	// One round: the next one is an hour away.
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: raw
    path: %s
    seqread: {interval: 1h, bytes: 32MiB, block_size: 1MiB}
    limits:  {bandwidth: 8MiB}
`, dev))
	rec := recordStats(t, dev, 50*time.Millisecond)
	e := framework.StartExporter(t, cfg)
	f := framework.WaitMetric(t, e, 30*time.Second, "the seqread round", func(f families) bool {
		return metric(f, "diskprobe_probe_runs_total", "target", "raw", "probe", "seqread") >= 1
	})
	rec.Stop()
	noErrors(t, f, "raw", "seqread")
	if b := metric(f, "diskprobe_sequential_bytes_total", "target", "raw", "direction", "read"); b != 32*mib {
		t.Fatalf("seqread reported %v bytes, want 32 MiB", b)
	}
	checkBandwidth(t, "seqread", rec.Points(), readSectors, 32*mib)
}

func TestReadProbeFilePreparationHeldToBandwidthLimit(t *testing.T) {
	dev, dir := testenv.LoopExt4(t, 128*mib)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: dir
    path: %s
    randread: {interval: 1s, ops: 1, file_size: 32MiB}
    limits:   {bandwidth: 8MiB, min_free: 1MiB}
`, dir))
	rec := recordStats(t, dev, 50*time.Millisecond)
	e := framework.StartExporter(t, cfg)
	waitLog(t, e, 30*time.Second, "read probe file prepared")
	rec.Stop()
	// The file's data, plus a little ext4 metadata and journal.
	checkBandwidth(t, "read probe file preparation", rec.Points(), writeSectors, 32*mib)

	// The randread rounds due during the ~4 s of preparation were skipped and counted.
	f := e.MustScrape()
	if n := metric(f, "diskprobe_probe_skipped_total", "target", "dir", "probe", "randread", "reason", "preparing"); n < 2 {
		t.Errorf("diskprobe_probe_skipped_total{reason=\"preparing\"} = %v after a ~4 s preparation with randread due every second", n)
	}
	if !strings.Contains(e.Log.String(), `msg="preparing the read probe file"`) {
		t.Errorf("no preparation progress in the log:\n%s", e.Log.String())
	}
}
