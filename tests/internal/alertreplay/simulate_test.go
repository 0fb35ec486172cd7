package alertreplay

import (
	"math/rand/v2"
	"slices"
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

// A freeze catches the round issued during it: one sync returns when the freeze ends, the
// rest of the round after it, and a round that falls due meanwhile is skipped and counted.
// Freezes of 20 s every 2 minutes, at 15 s ±10 % rounds, catch one round each (one slow sync
// a freeze, ~1 in 140) and skip a round only when the caught sync outlasts the next due time.
func TestSimulatedFreezesSlowOneSyncAndSkipRounds(t *testing.T) {
	e := newExporter(7, DefaultProbing, []Phase{{Duration: 2 * time.Hour, Latency: constant(0.002),
		Freeze: &Freeze{Every: 2 * time.Minute, For: 20 * time.Second, After: time.Minute}}}, start)
	var scrapesWithSkip int
	for ts := start; !ts.After(start.Add(time.Hour)); ts = ts.Add(DefaultProbing.Scrape) {
		before := e.skipped
		e.advance(ts)
		if e.skipped > before {
			scrapesWithSkip++
		}
	}
	i := slices.Index(collector.LatencyBuckets, 1)
	slow := e.count - e.buckets[i]
	if slow < 29 || slow > 30 { // 30 freezes in the hour, the last one's sync may still be out
		t.Errorf("%d syncs over 1 s in an hour of 30 freezes, want one a freeze", slow)
	}
	if share := float64(slow) / float64(e.count); share > 0.01 {
		t.Errorf("%.2f %% of syncs over 1 s: a freeze should be a share under every 1 %% line", 100*share)
	}
	if e.skipped == 0 || e.skipped > slow {
		t.Errorf("%d rounds skipped for %d freezes: want some (a freeze outlasting the next due time), at most one a freeze", e.skipped, slow)
	}
	t.Logf("an hour: %d syncs, %d over 1 s, %d rounds skipped", e.count, slow, e.skipped)
}

// Latency given load (issue 43): with LoadScale each sync takes its sample times 1 + others'
// IOPS / LoadScale, at the level others' IOPS hold then; LoadSwing moves that level within
// ±LoadSwing of OtherIOPS every loadStep, the same for a member's seed every time, another
// for another seed, and the exported gauge is the level the syncs saw.
func TestSimulatedLatencyRisesWithTheLoadItSwingsTo(t *testing.T) {
	const iops, swing, scale = 200.0, 0.4, 500.0
	phases := []Phase{{Duration: 2 * time.Hour, Latency: constant(0.002), OtherIOPS: iops, LoadSwing: swing, LoadScale: scale}}
	e := newExporter(7, DefaultProbing, phases, start)
	same := newExporter(7, DefaultProbing, phases, start)
	other := newExporter(8, DefaultProbing, phases, start)
	lo, hi, differs := iops, iops, false
	var prevCount uint64
	prevSum := 0.0
	for ts := start.Add(loadStep / 2); ts.Before(start.Add(time.Hour)); ts = ts.Add(loadStep) {
		x := e.otherIOPS(ts)
		lo, hi = min(lo, x), max(hi, x)
		if x < iops*(1-swing) || x > iops*(1+swing) {
			t.Errorf("others' IOPS %.0f, want within ±%.0f %% of %.0f", x, 100*swing, iops)
		}
		if same.otherIOPS(ts) != x {
			t.Errorf("seed 7 swung to %.1f and to %.1f at one time", x, same.otherIOPS(ts))
		}
		differs = differs || other.otherIOPS(ts) != x
		// The syncs of the step's second half, away from its edges: each at 2 ms × (1 + x/500).
		e.advance(ts.Add(-loadStep / 4))
		prevCount, prevSum = e.count, e.sum
		e.advance(ts.Add(loadStep / 4))
		mean := (e.sum - prevSum) / float64(e.count-prevCount)
		if want := 0.002 * (1 + x/scale); mean < 0.999*want || mean > 1.001*want {
			t.Errorf("at %.0f others' IOPS: mean sync %.3f ms, want %.3f ms", x, mean*1e3, want*1e3)
		}
	}
	if hi-lo < iops*swing {
		t.Errorf("others' IOPS stayed within %.0f–%.0f in an hour: the load does not move", lo, hi)
	}
	if !differs {
		t.Error("seeds 7 and 8 swung alike: members' loads must move apart")
	}
}
