package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/ceilingcase"
)

// The device's ceiling, on the real kernel: the scenario of tests/internal/ceilingcase
// (a write IOPS cap, a read bandwidth cap, a gp2-like burst bucket kept by a controller,
// an unthrottled neighbour and a FUSE-slowed sick device, side by side in one exporter).
// The probes run every 2 s rather than at their defaults (15 s) so that the recogniser's
// 10 s windows close on time; what it takes at the defaults is the benchmark's
// (tests/bench/ceiling_test.go, make bench) and TestDeviceCeilingAtTheDefaultProbeRate
// (DISKPROBE_CEILING_DEFAULT_RATE=1).
func TestDeviceCeiling(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	// Until both caps and the emptied bucket's baseline are named and half a minute more
	// has shown whether at_ceiling holds, and the negatives have run long enough to have
	// been named were they capped (a recognition took 2m6s-2m16s measured).
	res := ceilingcase.Run(t, ceilingcase.Options{
		Interval:  "2s",
		Deadline:  7 * time.Minute,
		Negatives: 3*time.Minute + 30*time.Second,
		Settle:    30 * time.Second,
	})
	samples := res.Samples

	t.Run("WriteIOPSCapIsNamed", func(t *testing.T) {
		checkNamed(t, samples["write"], ceilingcase.NamedWrite, ceilingcase.WriteCap, "write IOPS", func(s ceilingcase.Sample) float64 { return s.IOPS["write"] })
	})
	t.Run("ReadBandwidthCapIsNamed", func(t *testing.T) {
		checkNamed(t, samples["read"], ceilingcase.NamedRead, ceilingcase.ReadCap, "read bytes/s", func(s ceilingcase.Sample) float64 { return s.Bytes["read"] })
	})
	t.Run("SteadyNeighbourOnAFreeDeviceIsNotCapped", func(t *testing.T) {
		notCapped(t, samples["steady"], "a device that keeps up with a steady 300 IOPS neighbour")
	})
	t.Run("SickDeviceWhoseThroughputFallsIsNeverCalledCapped", func(t *testing.T) {
		notCapped(t, samples["sick"], fmt.Sprintf("a device whose fsync slowed from 2 to %v and stayed there", ceilingcase.SickHold))
	})
	t.Run("BurstBalanceAndForecastFollowTheController", func(t *testing.T) {
		scoreBurst(t, samples["burst"], res.Log)
	})
	t.Run("EmptiedBucketIsNamedCappedAtItsBaseline", func(t *testing.T) {
		// The volume block says the device bursts to 1,000: its fall to the baseline is a
		// cap within minutes, not only once the burst is 15 minutes old.
		b, err := ceilingcase.ScoreBurst(samples["burst"], res.Log)
		if err != nil {
			t.Fatal(err)
		}
		if b.Baseline.Named == nil {
			last := b.Baseline.Last
			t.Fatalf("the bucket emptied after %v; by %v the baseline of %g IOPS was not named (at_ceiling %g, IOPS %v)",
				b.EmptyAt.Round(time.Second), last.At.Round(time.Second), ceilingcase.Baseline, last.AtCeiling, last.IOPS)
		}
		t.Logf("bucket emptied after %v; the baseline named %.1f IOPS %v later; at_ceiling changed %d times after",
			b.EmptyAt.Round(time.Second), b.Baseline.Level, (b.Baseline.Named.At - b.EmptyAt).Round(time.Second), b.Baseline.Flips)
	})
}

// checkNamed fails unless a sample named the cap within 10 %, and says when.
func checkNamed(t *testing.T, samples []ceilingcase.Sample, named func(ceilingcase.Sample) bool, limit float64, what string, level func(ceilingcase.Sample) float64) {
	t.Helper()
	c := ceilingcase.ScoreCap(samples, named, limit, level)
	if c.Named == nil {
		t.Fatalf("capped at %g %s: not named within 10%% in %v (last: at_ceiling %g, IOPS %v, bytes/s %v)",
			limit, what, c.Last.At.Round(time.Second), c.Last.AtCeiling, c.Last.IOPS, c.Last.Bytes)
	}
	t.Logf("capped at %g %s: named %.1f (%+.1f%%) after %v, probes every 2s; at_ceiling changed %d times in the %v after",
		limit, what, c.Level, c.ErrorPct(), c.Named.At.Round(time.Second), c.Flips, c.After().Round(time.Second))
	if c.Last.AtCeiling != 1 {
		t.Errorf("capped at %g %s: at_ceiling %g at the end, with the neighbour still on it", limit, what, c.Last.AtCeiling)
	}
}

// notCapped fails when any sample names a ceiling or says at_ceiling 1.
func notCapped(t *testing.T, samples []ceilingcase.Sample, what string) {
	t.Helper()
	if len(samples) == 0 {
		t.Fatal("no scrape answered")
	}
	n := ceilingcase.ScoreNegative(samples)
	if s := n.Capped; s != nil {
		t.Fatalf("%s was called capped after %v: at_ceiling %g, IOPS %v, bytes/s %v", what, s.At.Round(time.Second), s.AtCeiling, s.IOPS, s.Bytes)
	}
	if n.Last.AtCeiling != 0 {
		t.Errorf("%s: at_ceiling absent after %v; want 0 once the device has context", what, n.Last.At.Round(time.Second))
	}
	t.Logf("%s: not called capped in %v (%d scrapes)", what, n.Last.At.Round(time.Second), n.Scrapes)
}

// scoreBurst fails when the exporter's balance estimate or its forecast of the empty time
// strays from the controller's log.
func scoreBurst(t *testing.T, samples []ceilingcase.Sample, log ceilingcase.ControllerLog) {
	b, err := ceilingcase.ScoreBurst(samples, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("burst bucket (baseline %g, burst %g, %g I/Os): the controller's emptied after %v; balance ratio error over %d scrapes: mean %.3f, max %.3f; forecast of the empty time over %d scrapes while it drained: mean |error| %.1f s, max %.1f s",
		ceilingcase.Baseline, ceilingcase.Burst, ceilingcase.Bucket, b.EmptyAt.Round(100*time.Millisecond), b.Scrapes, b.MeanErr, b.MaxErr, b.Forecasts, b.MeanForecast, b.MaxForecast)
	// Both count the same device's completions; the exporter only at its units (about
	// every second here) and over a second or more. Loose enough for a loaded machine.
	if b.MeanErr > 0.10 {
		t.Errorf("balance ratio off the controller's by %.3f on average, want at most 0.10", b.MeanErr)
	}
	if b.Forecasts == 0 {
		t.Error("no forecast of the empty time while the bucket drained")
	} else if b.MeanForecast > 20 {
		t.Errorf("the empty time forecast was off by %.1f s on average, want at most 20 s (the bucket drained in %v)", b.MeanForecast, b.EmptyAt.Round(time.Second))
	}
}

// TestDeviceCeilingAtTheDefaultProbeRate is the write IOPS cap with the probes at their
// default intervals and ops: how long recognition takes in a default deployment. Minutes
// long, so only with DISKPROBE_CEILING_DEFAULT_RATE=1.
func TestDeviceCeilingAtTheDefaultProbeRate(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	if os.Getenv("DISKPROBE_CEILING_DEFAULT_RATE") == "" {
		t.Skip("minutes long: set DISKPROBE_CEILING_DEFAULT_RATE=1")
	}
	dev, dir := testenv.RAMLoopExt4(t, 256<<20)
	cg := testenv.ThrottleWrites(t, dev, ceilingcase.WriteCap)
	e := framework.StartExporter(t, framework.WriteConfig(t, "targets:\n"+ceilingcase.Target("write", dir, "", "")))
	cg.Add(e.Pid())
	start := time.Now()
	ceilingcase.Neighbour(t, cg, dir, ceilingcase.RandWrite...)
	samples := ceilingcase.Watch(t, e, []string{"write"}, start, 10*time.Minute, func(all map[string][]ceilingcase.Sample) bool {
		first, _ := ceilingcase.Recognised(all["write"], ceilingcase.NamedWrite)
		return first != nil && all["write"][len(all["write"])-1].At > first.At+30*time.Second
	})
	first, flips := ceilingcase.Recognised(samples["write"], ceilingcase.NamedWrite)
	if first == nil {
		t.Fatal("capped at 100 write IOPS, probes at their defaults: not named within 10 % in 10 minutes")
	}
	t.Logf("capped at 100 write IOPS, probes at their defaults: named %.1f after %v; at_ceiling changed %d times in the 30 s after",
		first.IOPS["write"], first.At.Round(time.Second), flips)
}
