package ceiling

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// synthetic is a synthetic device: each step adds a window's worth of counters.
type synthetic struct {
	t   *testing.T
	r   *Recogniser
	now time.Time
	s   device.Stats
	rng *rand.Rand
}

// step is what the device and the prober did over one window.
type step struct {
	writeIOPS, readIOPS float64       // everyone's
	blockSize           int           // bytes per I/O
	queue               float64       // average requests in flight at the device
	service             time.Duration // the device's own time per request
	ownOps              int           // the prober's operations in the step
	ownLatency          time.Duration // and their mean time each
	noise               float64       // ±share of random noise on the rates
}

func newSynthetic(t *testing.T) *synthetic {
	d := &synthetic{t: t, r: New(DefaultThresholds), now: time.Unix(1_800_000_000, 0), rng: rand.New(rand.NewPCG(1, 2))}
	d.r.Observe(d.now, d.s)
	return d
}

// run plays n steps of length 10 s.
func (d *synthetic) run(n int, st step) {
	const length = 10 * time.Second
	for range n {
		jitter := 1 + st.noise*(2*d.rng.Float64()-1)
		w := uint64(st.writeIOPS * jitter * length.Seconds())
		r := uint64(st.readIOPS * jitter * length.Seconds())
		bs := uint64(max(st.blockSize, 4096))
		d.s.WriteIOs += w
		d.s.ReadIOs += r
		d.s.WriteSectors += w * bs / 512
		d.s.ReadSectors += r * bs / 512
		d.s.WriteTime += time.Duration(w) * st.service
		d.s.ReadTime += time.Duration(r) * st.service
		d.s.QueueTime += time.Duration(st.queue * float64(length))
		d.r.Own(st.ownOps, int64(st.ownOps)*2300, time.Duration(st.ownOps)*st.ownLatency, true)
		d.now = d.now.Add(length)
		d.r.Observe(d.now, d.s)
	}
}

// capped is a device held at 100 write IOPS by a throttle above it, a neighbour queueing
// four deep: the device is quick, the prober waits behind the queue.
var capped = step{writeIOPS: 100, blockSize: 4096, queue: 0.01, service: 100 * time.Microsecond,
	ownOps: 20, ownLatency: 40 * time.Millisecond, noise: 0.03}

func TestCapIsRecognisedAtItsLevelWithinMinutes(t *testing.T) {
	d := newSynthetic(t)
	start := d.now
	for i := 0; i < 60 && !d.r.State().Recognised(); i++ {
		d.run(1, capped)
	}
	st := d.r.State()
	if !st.Recognised() {
		t.Fatal("a device flat at 100 write IOPS with work waiting for 10 minutes was not recognised as capped")
	}
	took := st.Since.Sub(start)
	t.Logf("recognised after %v: write %.1f IOPS, %.0f B/s", took, st.Ceiling[WriteIOPS], st.Ceiling[WriteBytes])
	if took > 3*time.Minute {
		t.Errorf("took %v, want at most 3 minutes", took)
	}
	if got := st.Ceiling[WriteIOPS]; math.Abs(got-100) > 5 {
		t.Errorf("write ceiling %.1f IOPS, want 100 ±5", got)
	}
	if st.Ceiling[ReadIOPS] != 0 {
		t.Errorf("no reads, yet a read ceiling of %.1f", st.Ceiling[ReadIOPS])
	}
	if !st.AtCeiling {
		t.Error("recognised but not at the ceiling")
	}
}

func TestDeviceWhoseThroughputFallsAsLatencyRisesIsNotCapped(t *testing.T) {
	d := newSynthetic(t)
	// A failing SSD: each request takes longer, the queue grows, fewer complete.
	for i := range 90 {
		f := 1 + float64(i)/10
		d.run(1, step{writeIOPS: 400 / f, blockSize: 4096, queue: 2 * f, service: time.Duration(f * float64(2*time.Millisecond)),
			ownOps: 20, ownLatency: time.Duration(f * float64(4*time.Millisecond))})
		if d.r.State().Recognised() {
			t.Fatalf("step %d: a device whose throughput falls as its latency rises was called capped at %v", i, d.r.State().Ceiling)
		}
	}
}

func TestSlowDeviceUnderOnlyTheProbersTrickleIsNotCapped(t *testing.T) {
	d := newSynthetic(t)
	// Only the prober: 20 ops of 100 ms each (a FUSE-slowed fdatasync), three requests
	// each at the device, which holds them there.
	d.run(60, step{writeIOPS: 6, blockSize: 4096, queue: 1.5, service: 100 * time.Millisecond, ownOps: 20, ownLatency: 100 * time.Millisecond})
	if st := d.r.State(); st.Recognised() {
		t.Errorf("the prober's own trickle on a slow device was called a ceiling: %v", st.Ceiling)
	}
}

func TestSteadyLoadOnAHealthyDeviceIsNotCapped(t *testing.T) {
	d := newSynthetic(t)
	// A database writing a flat 2,000 IOPS: the device keeps up, nobody waits.
	d.run(60, step{writeIOPS: 2000, blockSize: 4096, queue: 0.3, service: 150 * time.Microsecond,
		ownOps: 20, ownLatency: 600 * time.Microsecond, noise: 0.02})
	if st := d.r.State(); st.Recognised() {
		t.Errorf("a steady load the device keeps up with was called a ceiling: %v", st.Ceiling)
	}
}

func TestCapInsideTheDeviceIsRecognisedByItsQueue(t *testing.T) {
	d := newSynthetic(t)
	// An EBS-like cap: the requests wait inside the device, so its own time per request
	// is as long as the prober's; its queue says they waited.
	d.run(20, step{writeIOPS: 3000, blockSize: 16384, queue: 8, service: 2700 * time.Microsecond,
		ownOps: 20, ownLatency: 2700 * time.Microsecond, noise: 0.02})
	st := d.r.State()
	if !st.Recognised() || math.Abs(st.Ceiling[WriteIOPS]-3000) > 150 {
		t.Errorf("a device flat at 3,000 IOPS with 8 requests queued was not recognised there: %+v", st)
	}
}

func TestCeilingStandsUntilContradictedAndAtCeilingDoesNotFlicker(t *testing.T) {
	d := newSynthetic(t)
	d.run(20, capped)
	if !d.r.State().AtCeiling {
		t.Fatal("not recognised")
	}
	since := d.r.State().Since
	// Demand comes and goes window by window: the flag holds.
	idle := step{writeIOPS: 30, blockSize: 4096, service: 100 * time.Microsecond, ownOps: 20, ownLatency: 500 * time.Microsecond}
	for range 5 {
		d.run(1, idle)
		d.run(1, capped)
		if !d.r.State().AtCeiling {
			t.Fatal("at_ceiling flickered off on one window without work waiting")
		}
	}
	// Idle for a while: no longer at the ceiling, which stays known.
	d.run(3, idle)
	st := d.r.State()
	if st.AtCeiling {
		t.Error("still at the ceiling after three idle windows")
	}
	if !st.Recognised() || st.Since != since {
		t.Errorf("the ceiling was forgotten or re-dated while the device idled: %+v", st)
	}
	// Back at it: at the ceiling again after two windows, same since.
	d.run(2, capped)
	if st := d.r.State(); !st.AtCeiling || st.Since != since {
		t.Errorf("back at the level: want at ceiling since %v, got %+v", since, st)
	}
	// The device completes 150 IOPS: no ceiling at 100 after all.
	d.run(1, step{writeIOPS: 150, blockSize: 4096, queue: 0.1, service: 100 * time.Microsecond, ownOps: 20, ownLatency: time.Millisecond})
	if st := d.r.State(); st.Recognised() || st.AtCeiling {
		t.Errorf("a window at 1.5× the ceiling did not contradict it: %+v", st)
	}
}

func TestLevelBelowARecentPeakIsNotRecognisedUntilThePeakIsOld(t *testing.T) {
	d := newSynthetic(t)
	d.run(6, step{writeIOPS: 500, blockSize: 4096, queue: 0.5, service: 100 * time.Microsecond, ownOps: 20, ownLatency: time.Millisecond})
	start := d.now
	for i := 0; i < 200 && !d.r.State().Recognised(); i++ {
		d.run(1, capped)
	}
	took := d.r.State().Since.Sub(start)
	if took < DefaultThresholds.PeakHorizon-DefaultThresholds.PeakHorizon/peakSlots {
		t.Errorf("named a ceiling of 100 after %v, with 500 IOPS done %v before", took, took)
	}
}

func TestBaselineAfterABurstIsNamedWhenTheVolumeSaysItBursts(t *testing.T) {
	d := newSynthetic(t)
	d.r.Expect(WriteIOPS, 100, 1000)
	d.run(6, step{writeIOPS: 1000, blockSize: 4096, queue: 0.5, service: 100 * time.Microsecond, ownOps: 20, ownLatency: time.Millisecond})
	start := d.now
	for i := 0; i < 60 && !d.r.State().Recognised(); i++ {
		d.run(1, capped)
	}
	st := d.r.State()
	if !st.Recognised() || st.Since.Sub(start) > 3*time.Minute {
		t.Fatalf("a volume that bursts to 1,000 and fell back to 100: want its baseline named within 3 minutes, got %+v after %v", st, d.now.Sub(start))
	}
	// A level the tiers do not explain still waits for the peak to age.
	d = newSynthetic(t)
	d.r.Expect(WriteIOPS, 300, 1000)
	d.run(6, step{writeIOPS: 1000, blockSize: 4096, queue: 0.5, service: 100 * time.Microsecond, ownOps: 20, ownLatency: time.Millisecond})
	d.run(30, capped)
	if st := d.r.State(); st.Ceiling[WriteIOPS] > 0 {
		t.Errorf("a level of 100 on a volume stated at 300 was named within 5 minutes of 1,000: %+v", st)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	r := New(DefaultThresholds)
	now := time.Unix(0, 0)
	var s device.Stats
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(5 * time.Second)
		s.WriteIOs += 500
		s.WriteSectors += 4000
		s.WriteTime += time.Millisecond
		r.Own(20, 46000, 800*time.Millisecond, true)
		r.Observe(now, s)
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %.1f times a call", allocs)
	}
}

func TestCreditDrainsAtTheBurstAndRefillsAtTheBaseline(t *testing.T) {
	c := NewCredit(Bucket{Size: 60000, Refill: 100, Baseline: 100})
	now := time.Unix(0, 0)
	var s device.Stats
	c.Observe(now, s)
	if c.Ratio() != 1 || !math.IsInf(c.EmptyIn(), 1) {
		t.Fatalf("a new bucket: ratio %v, empty in %v; want full and not draining", c.Ratio(), c.EmptyIn())
	}
	// 1,000 IOPS for 30 s: −900/s.
	for range 30 {
		now = now.Add(time.Second)
		s.WriteIOs += 1000
		c.Observe(now, s)
	}
	if want := (60000.0 - 27000) / 60000; math.Abs(c.Ratio()-want) > 1e-9 {
		t.Errorf("after 30 s at 1,000 IOPS: ratio %v, want %v", c.Ratio(), want)
	}
	if want := 33000.0 / 900; math.Abs(c.EmptyIn()-want) > 1e-9 {
		t.Errorf("empty in %v s, want %v", c.EmptyIn(), want)
	}
	for range 60 {
		now = now.Add(time.Second)
		s.WriteIOs += 1000
		c.Observe(now, s)
	}
	if c.Ratio() != 0 || c.EmptyIn() != 0 {
		t.Errorf("drained: ratio %v, empty in %v; want 0, 0", c.Ratio(), c.EmptyIn())
	}
	// Idle: refills at 100/s, clamped at the size.
	now = now.Add(1000 * time.Second)
	c.Observe(now, s)
	if c.Ratio() != 1 {
		t.Errorf("after 1,000 s idle: ratio %v, want 1", c.Ratio())
	}
	c.Empty()
	if c.Ratio() != 0 {
		t.Error("Empty did not re-anchor the estimate")
	}
}

func TestBucketAtBaselineReanchorsOnlyAtTheBaseline(t *testing.T) {
	b := Bucket{Size: 1, Refill: 100, Baseline: 100}
	st := State{AtCeiling: true, Since: time.Unix(1, 0)}
	st.Ceiling[WriteIOPS] = 98
	if !b.AtBaseline(&st, 0.1) {
		t.Error("held at 98 write IOPS, baseline 100: want at baseline")
	}
	st.Ceiling[WriteIOPS] = 1000
	if b.AtBaseline(&st, 0.1) {
		t.Error("held at the burst rate: not at baseline")
	}
}

// BenchmarkObserve is the recogniser's cost per device read, the work added to each of a
// target's units (a window closes about every second of them at the default schedule).
func BenchmarkObserve(b *testing.B) {
	r := New(DefaultThresholds)
	now := time.Unix(0, 0)
	var s device.Stats
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(5 * time.Second)
		s.WriteIOs += 500
		s.WriteSectors += 4000
		s.QueueTime += 10 * time.Second
		r.Own(20, 46000, 800*time.Millisecond, true)
		r.Observe(now, s)
	}
}
