package alertreplay

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/collector"
)

type constant float64

func (c constant) Sample(_ *rand.Rand) float64 { return float64(c) }
func (c constant) String() string              { return seconds(float64(c)) }

// The simulated probe must load the histogram as the exporter does: 20 syncs a round every
// 15 s on a fast disk (so 4800 an hour), and fewer rounds, not overlapping ones, once a
// round takes longer than the interval: a round of 20 one-second syncs takes 20 s, the
// round due meanwhile is skipped (as the runner skips it), so one starts every ~30 s.
func TestSimulatedProbeKeepsTheExporterRate(t *testing.T) {
	for _, c := range []struct {
		latency       float64
		lo, hi        uint64
		inflightAbove float64
	}{
		{0.002, 4700, 4900, 0},
		{1, 2300, 2500, 0.5},
	} {
		e := newExporter(7, DefaultProbing, []Phase{{Duration: 2 * time.Hour, Latency: constant(c.latency)}}, start)
		var maxInflight float64
		for ts := start; !ts.After(start.Add(time.Hour)); ts = ts.Add(DefaultProbing.Scrape) {
			e.advance(ts)
			maxInflight = max(maxInflight, e.inflight(ts))
		}
		if e.count < c.lo || e.count > c.hi {
			t.Errorf("syncs of %s: %d in an hour, want %d–%d", seconds(c.latency), e.count, c.lo, c.hi)
		}
		if done := e.count - e.count%uint64(DefaultProbing.Ops); e.runs*uint64(DefaultProbing.Ops) != done {
			t.Errorf("syncs of %s: %d rounds for %d syncs", seconds(c.latency), e.runs, e.count)
		}
		if maxInflight <= c.inflightAbove && c.inflightAbove > 0 {
			t.Errorf("syncs of %s: the in-flight age never exceeded %.1f s", seconds(c.latency), c.inflightAbove)
		}
		i := len(collector.LatencyBuckets) - 1
		if e.buckets[i] != e.count && c.latency <= collector.LatencyBuckets[i] {
			t.Errorf("syncs of %s: %d of %d in the top bucket", seconds(c.latency), e.buckets[i], e.count)
		}
	}
}
