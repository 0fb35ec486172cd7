package collector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// fakeClock moves only when the test says so.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// settled reports, for each runner the test started, whether the rounds handed to its
	// worker have begun. Advance waits for them after every step: otherwise, on a loaded
	// machine (the race detector, a busy CI host), time ran on by whole intervals before a
	// worker was scheduled, and a round began late or was skipped as still pending.
	settled []func() bool
}

type fakeTimer struct {
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop() bool          { return true }

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// waiting reports how many timers are armed and not yet fired.
func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.fired {
			n++
		}
	}
	return n
}

// Advance moves time by d in steps, firing timers as they come due, and waits after
// each firing until the schedule loops have armed their next timer.
func (c *fakeClock) Advance(t *testing.T, d, step time.Duration, loops int) {
	t.Helper()
	for end := c.Now().Add(d); c.Now().Before(end); {
		c.waitArmed(t, loops)
		c.mu.Lock()
		c.now = c.now.Add(step)
		for _, tm := range c.timers {
			if !tm.fired && !tm.at.After(c.now) {
				tm.fired = true
				tm.c <- c.now
			}
		}
		c.mu.Unlock()
		c.waitSettled(t)
	}
	c.waitArmed(t, loops)
}

func (c *fakeClock) waitSettled(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	settled := c.settled
	c.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := range settled {
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatal("a worker did not begin the round handed to it")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func (c *fakeClock) waitArmed(t *testing.T, loops int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.waiting() < loops {
		if time.Now().After(deadline) {
			t.Fatalf("schedule loops did not re-arm their timers (%d of %d)", c.waiting(), loops)
		}
		time.Sleep(time.Millisecond)
	}
}

// fakeProber records when rounds start; it can be made to block like a stuck disk.
type fakeProber struct {
	clock   *fakeClock
	mu      sync.Mutex
	starts  []time.Time
	block   chan struct{} // when non-nil, Round waits for it to close
	parked  atomic.Int32  // rounds waiting on block now
	sleep   time.Duration // real time each round takes, so overlaps would show
	active  *atomic.Int32 // rounds running now, shared between probers on one disk
	maxSeen *atomic.Int32
}

func (p *fakeProber) Round(ctx context.Context, env *probe.Env) (probe.Result, error) {
	if n := p.active.Add(1); n > p.maxSeen.Load() {
		p.maxSeen.Store(n)
	}
	defer p.active.Add(-1)
	p.mu.Lock()
	p.starts = append(p.starts, p.clock.Now())
	block := p.block
	p.mu.Unlock()
	if block != nil {
		p.parked.Add(1)
		<-block
		p.parked.Add(-1)
	}
	time.Sleep(p.sleep)
	return probe.Result{Ops: 1, Bytes: 2300}, nil
}

func (p *fakeProber) Close() error { return nil }

func (p *fakeProber) rounds() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.starts...)
}

func testTarget(name string, interval time.Duration) config.Target {
	f := config.Default(config.ProbeFsync)
	f.Interval = interval
	return config.Target{Name: name, Path: "/nonexistent/" + name, Type: config.TypeDirectory, Probe: map[string]*config.ProbeConfig{config.ProbeFsync: &f}, Limits: config.DefaultLimits}
}

func startFakeRunner(t *testing.T, m *Metrics, clock *fakeClock, tg config.Target, lock chan struct{}, fp *fakeProber) *runner {
	t.Helper()
	r := testRunner(tg, lock, m, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, pr := range r.probes {
		pr.build = func(*worker, *config.ProbeConfig) (probe.Prober, error) { return fp, nil }
	}
	clock.mu.Lock()
	clock.settled = append(clock.settled, func() bool {
		select {
		case <-r.workerDone: // stopped: what it left queued never begins
			return true
		default:
		}
		for _, pr := range r.probes {
			// A round pending is queued or running; only one blocked in Round, as on a
			// stuck disk, stays so. Any other must end before time moves on: a worker
			// descheduled inside Round while Advance ran through a whole interval made
			// the next round be skipped as still pending (a CI run saw a 21.5 s gap).
			if pr.pending.Load() && fp.parked.Load() == 0 {
				return false
			}
		}
		return true
	})
	clock.mu.Unlock()
	r.start()
	return r
}

// stopWithin stops r, waiting up to d for its worker; it reports whether the worker ended.
func stopWithin(r *runner, d time.Duration) bool {
	deadline, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return r.stop(deadline)
}

func newFakeProber(clock *fakeClock) *fakeProber {
	return &fakeProber{clock: clock, active: new(atomic.Int32), maxSeen: new(atomic.Int32)}
}

func TestRoundIntervalsStayWithinTenPercentJitter(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	fp := newFakeProber(clock)
	r := startFakeRunner(t, m, clock, testTarget("a", 10*time.Second), make(chan struct{}, 1), fp)
	defer stopWithin(r, time.Second)

	clock.Advance(t, 10*time.Minute, 100*time.Millisecond, 1)
	waitRounds(t, fp, 50)
	starts := fp.rounds()
	var lo, hi time.Duration = time.Hour, 0
	for i := 1; i < len(starts); i++ {
		d := starts[i].Sub(starts[i-1])
		lo, hi = min(lo, d), max(hi, d)
		if d < 9*time.Second-100*time.Millisecond || d > 11*time.Second+100*time.Millisecond {
			t.Errorf("round %d came %v after the previous one; want 10s ±10%%", i, d)
		}
	}
	if hi-lo < 200*time.Millisecond {
		t.Errorf("intervals between %v and %v: no jitter", lo, hi)
	}
	if got := testutil.ToFloat64(m.runs.WithLabelValues("a", "fsync")); int(got) != len(starts) {
		t.Errorf("probe_runs_total = %v, rounds run %d", got, len(starts))
	}
}

// settledGoroutines is the number of goroutines once it is at most want, or the fewest seen
// in a second: a goroutine of the runtime or the testing package that comes and goes must
// not read as a round piling up, while rounds that did pile up stay for the whole second.
func settledGoroutines(want int) int {
	fewest := runtime.NumGoroutine()
	for deadline := time.Now().Add(time.Second); fewest > want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		fewest = min(fewest, runtime.NumGoroutine())
	}
	return fewest
}

func waitRounds(t *testing.T, fp *fakeProber, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(fp.rounds()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d rounds ran, want at least %d", len(fp.rounds()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRoundsDueWhileAnOperationIsStuckAreSkippedAndCounted(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	fp := newFakeProber(clock)
	fp.block = make(chan struct{})
	before := runtime.NumGoroutine()
	r := startFakeRunner(t, m, clock, testTarget("stuck", time.Second), make(chan struct{}, 1), fp)

	clock.Advance(t, 30*time.Second, 100*time.Millisecond, 1)
	if got := len(fp.rounds()); got != 1 {
		t.Fatalf("%d rounds started while the first was stuck; at most one operation may be outstanding", got)
	}
	skipped := testutil.ToFloat64(m.skipped.WithLabelValues("stuck", "fsync", SkipInflight))
	if skipped < 25 || skipped > 31 {
		t.Errorf("skipped{reason=inflight} = %v over 30 rounds due while stuck", skipped)
	}
	if g := settledGoroutines(before + 2); g > before+2 {
		t.Errorf("goroutines grew from %d to %d while stuck: rounds must not pile up", before, g)
	}

	close(fp.block) // the I/O returns
	clock.Advance(t, 5*time.Second, 100*time.Millisecond, 1)
	waitRounds(t, fp, 3)

	stopWithin(r, time.Second)
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after stop, %d before start: the runner leaked", g, before)
	}
}

func TestStopDoesNotWaitForAStuckOperation(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	fp := newFakeProber(clock)
	fp.block = make(chan struct{})
	defer close(fp.block)
	r := startFakeRunner(t, m, clock, testTarget("hung", time.Second), make(chan struct{}, 1), fp)
	clock.Advance(t, 3*time.Second, 100*time.Millisecond, 1)
	start := time.Now()
	if stopWithin(r, 200*time.Millisecond) {
		t.Error("stop reported the worker finished while its operation was stuck")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stop took %v with a stuck operation", d)
	}
}

func TestTargetsOnTheSameDiskNeverOverlap(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	disk := make(chan struct{}, 1)
	active, maxSeen := new(atomic.Int32), new(atomic.Int32)
	var runners []*runner
	var probers []*fakeProber
	for _, name := range []string{"p1", "p2", "p3"} {
		fp := &fakeProber{clock: clock, active: active, maxSeen: maxSeen, sleep: 3 * time.Millisecond}
		probers = append(probers, fp)
		runners = append(runners, startFakeRunner(t, m, clock, testTarget(name, time.Second), disk, fp))
	}
	enough := func() bool {
		for _, fp := range probers {
			if len(fp.rounds()) < 10 {
				return false
			}
		}
		return true
	}
	for i := 0; i < 300 && !enough(); i++ {
		clock.Advance(t, time.Second, 50*time.Millisecond, 3)
		time.Sleep(5 * time.Millisecond)
	}
	if !enough() {
		t.Fatal("targets sharing a disk starved each other")
	}
	for _, r := range runners {
		stopWithin(r, time.Second)
	}
	if maxSeen.Load() != 1 {
		t.Errorf("%d rounds ran at once on one disk", maxSeen.Load())
	}
}

func TestBudgetHoldsTheOperationRate(t *testing.T) {
	l := config.DefaultLimits
	l.IOPS = 200
	b := NewBudget(l, 2300)
	ctx := context.Background()
	start := time.Now()
	// burst (20) + 40 more at 200/s: at least 200 ms.
	for range 60 {
		if err := b.Wait(ctx, 2300); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("60 operations at 200/s with a burst of 20 took %v; the limit did not hold", d)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Wait(ctx, 2300); err == nil {
		t.Error("Wait ignored a cancelled context")
	}
}

func TestMetricNamesComeFromTheRegisteredCollectors(t *testing.T) {
	names := map[string]bool{}
	for _, n := range MetricNames() {
		names[n] = true
	}
	for _, want := range []string{
		"diskprobe_fdatasync_duration_seconds", "diskprobe_write_duration_seconds", "diskprobe_read_duration_seconds",
		"diskprobe_sequential_bytes_total", "diskprobe_sequential_duration_seconds_total", "diskprobe_sequential_throughput_bytes_per_second",
		"diskprobe_probe_runs_total", "diskprobe_probe_errors_total", "diskprobe_probe_skipped_total",
		"diskprobe_probe_last_success_timestamp_seconds", "diskprobe_probe_inflight_seconds",
		"diskprobe_probe_io_operations_total", "diskprobe_probe_io_bytes_total",
		"diskprobe_probe_cpu_wait_seconds_total",
		"diskprobe_device_busy_ratio", "diskprobe_device_other_iops", "diskprobe_target_info",
		"diskprobe_config_last_reload_successful", "diskprobe_config_last_reload_success_timestamp_seconds",
		"diskprobe_exporter_build_info",
	} {
		if !names[want] {
			t.Errorf("metric %s of the contract (docs/design.md, docs/metrics.md) is not registered", want)
		}
	}
}

// lowSpaceProber is a write probe on a filling disk: under the floor with a different
// number of free MiB every round.
type lowSpaceProber struct{ rounds atomic.Int32 }

func (p *lowSpaceProber) Round(context.Context, *probe.Env) (probe.Result, error) {
	n := p.rounds.Add(1)
	return probe.Result{}, fmt.Errorf("%w: %d MiB free", probe.ErrLowFreeSpace, 100-n)
}

func (p *lowSpaceProber) Close() error { return nil }

func TestLowFreeSpaceIsLoggedOncePerStateNotPerRound(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	var log testenv.SyncBuffer
	r := testRunner(testTarget("full", time.Second), make(chan struct{}, 1), m, clock, slog.New(slog.NewTextHandler(&log, nil)))
	lp := &lowSpaceProber{}
	r.probes[0].build = func(*worker, *config.ProbeConfig) (probe.Prober, error) { return lp, nil }
	r.start()
	clock.Advance(t, 10*time.Second, 100*time.Millisecond, 1)
	deadline := time.Now().Add(5 * time.Second)
	for lp.rounds.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stopWithin(r, time.Second)
	if lp.rounds.Load() < 5 {
		t.Fatalf("only %d rounds ran", lp.rounds.Load())
	}
	if n := strings.Count(log.String(), "probe failed"); n != 1 {
		t.Errorf("%d log lines for %d rounds under the floor, want 1:\n%s", n, lp.rounds.Load(), log.String())
	}
	if got := testutil.ToFloat64(m.skipped.WithLabelValues("full", "fsync", SkipLowFreeSpace)); int32(got) != lp.rounds.Load() {
		t.Errorf("skipped{reason=low_free_space} = %v after %d rounds", got, lp.rounds.Load())
	}
}

// TestReadRoundSkippedWhilePreparingRunsOnceTheFileIsReady: after a start, the first
// read round finds its probe file not ready (being written, or only to be reopened) and
// is skipped as preparing; it must run as soon as the file is ready, not a whole interval
// later (10 minutes for seqread by default, an hour here).
func TestReadRoundSkippedWhilePreparingRunsOnceTheFileIsReady(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	rr := config.Default(config.ProbeRandread)
	rr.Interval, rr.FileSize = time.Hour, 4<<20
	tg := config.Target{Name: "data", Path: t.TempDir(), Type: config.TypeDirectory, Probe: map[string]*config.ProbeConfig{config.ProbeRandread: &rr}, Limits: config.DefaultLimits}
	tg.Limits.MinFree = 0
	if err := probe.CheckDirectIO(tg.Path); err != nil {
		t.Skipf("%v (the read probe needs O_DIRECT on the test's temporary directory)", err)
	}
	r := testRunner(tg, make(chan struct{}, 1), m, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.start()
	defer stopWithin(r, 5*time.Second)

	clock.Advance(t, 2*time.Second, 100*time.Millisecond, 1) // the first round comes within 2 s of the start
	runs := func() float64 { return testutil.ToFloat64(m.runs.WithLabelValues("data", "randread")) }
	deadline := time.Now().Add(20 * time.Second) // real time for the 4 MiB preparation; the clock stands still
	for runs() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	skipped := testutil.ToFloat64(m.skipped.WithLabelValues("data", "randread", SkipPreparing))
	if skipped != 1 || runs() != 1 {
		t.Fatalf("randread: %v rounds skipped as preparing, %v run with the clock held; want the skipped round run once the file was ready", skipped, runs())
	}
	if errs := testutil.ToFloat64(m.errors.WithLabelValues("data", "randread")); errs != 0 {
		t.Errorf("%v failed rounds", errs)
	}
}

// cpuWaitProber is a probe whose every round waited 4 ms for a CPU, where the kernel
// reports it (known).
type cpuWaitProber struct {
	known  bool
	rounds atomic.Int32
}

func (p *cpuWaitProber) Round(context.Context, *probe.Env) (probe.Result, error) {
	p.rounds.Add(1)
	return probe.Result{Ops: 1, Bytes: 2300, IO: 10 * time.Millisecond, CPUWait: 4 * time.Millisecond, CPUWaitKnown: p.known}, nil
}

func (p *cpuWaitProber) Close() error { return nil }

// TestCPUWaitSeriesIsAbsentWhereTheKernelDoesNotReportIt: a counter at 0 would say "the
// host never made this disk look slow" where nobody measured it. It comes into being with
// the first measured round, adds every round's wait, and goes with its target.
func TestCPUWaitSeriesIsAbsentWhereTheKernelDoesNotReportIt(t *testing.T) {
	for _, known := range []bool{true, false} {
		clock := newFakeClock()
		m := NewMetrics(prometheus.NewRegistry())
		r := testRunner(testTarget("t", time.Second), make(chan struct{}, 1), m, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
		p := &cpuWaitProber{known: known}
		r.probes[0].build = func(*worker, *config.ProbeConfig) (probe.Prober, error) { return p, nil }
		r.start()
		clock.Advance(t, 5*time.Second, 100*time.Millisecond, 1)
		deadline := time.Now().Add(5 * time.Second)
		for p.rounds.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		stopWithin(r, time.Second)
		rounds := float64(p.rounds.Load())
		if rounds < 3 {
			t.Fatalf("only %v rounds ran", rounds)
		}
		if n := testutil.CollectAndCount(m.cpuWait); !known {
			if n != 0 {
				t.Errorf("%d CPU wait series where the kernel does not report it, want none", n)
			}
			continue
		} else if n != 1 {
			t.Fatalf("%d CPU wait series after %v measured rounds, want 1", n, rounds)
		}
		// A round cut short by the stop is not accounted.
		if got := testutil.ToFloat64(m.cpuWait.WithLabelValues("t", "fsync")); got < 0.004*(rounds-1)-1e-9 || got > 0.004*rounds+1e-9 {
			t.Errorf("CPU wait %v s after %v rounds of 4 ms", got, rounds)
		}
		m.forget("t")
		if n := testutil.CollectAndCount(m.cpuWait); n != 0 {
			t.Errorf("%d CPU wait series left after the target was removed", n)
		}
	}
}

// The commit probe fills its file of its own in steps, between rounds, as the read probe
// file is: its first scheduled round is skipped once as preparing, and it commits as soon
// as the file is full, not an interval per step later. Its histogram and its own load
// counters (every write and fdatasync, the filling included) are the probe's.
func TestCommitRoundSkippedWhileItsFileFillsRunsOnceItIsFull(t *testing.T) {
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c := config.Default(config.ProbeCommit)
	c.Interval, c.FileSize, c.Ops = time.Hour, 20<<20, 3
	tg := config.Target{Name: "data", Path: t.TempDir(), Type: config.TypeDirectory, Probe: map[string]*config.ProbeConfig{config.ProbeCommit: &c}, Limits: config.DefaultLimits}
	tg.Limits.MinFree = 0
	r := testRunner(tg, make(chan struct{}, 1), m, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.start()
	defer stopWithin(r, 5*time.Second)

	clock.Advance(t, 2*time.Second, 100*time.Millisecond, 1)
	runs := func() float64 { return testutil.ToFloat64(m.runs.WithLabelValues("data", "commit")) }
	deadline := time.Now().Add(30 * time.Second) // real time for 20 MiB at 50 MiB/s; the clock stands still
	for runs() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	skipped := testutil.ToFloat64(m.skipped.WithLabelValues("data", "commit", SkipPreparing))
	if skipped != 1 || runs() != 1 {
		t.Fatalf("commit: %v rounds skipped as preparing, %v run with the clock held; want one skipped, then the round run once the file was full", skipped, runs())
	}
	if errs := testutil.ToFloat64(m.errors.WithLabelValues("data", "commit")); errs != 0 {
		t.Errorf("%v failed rounds", errs)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var commits uint64
	for _, f := range families {
		if f.GetName() == "diskprobe_commit_duration_seconds" {
			for _, s := range f.GetMetric() {
				commits += s.GetHistogram().GetSampleCount()
			}
		}
	}
	if commits != 3 {
		t.Errorf("diskprobe_commit_duration_seconds counted %d commits, want the round's 3", commits)
	}
	wantOps := float64((20<<20-probe.HeaderSize+probe.FillBlock-1)/probe.FillBlock + 3*(c.Pages+3))
	if ops := testutil.ToFloat64(m.ioOps.WithLabelValues("data", "commit")); ops != wantOps {
		t.Errorf("%v operations counted, want %v: the filling's writes and three commits' writes and fdatasyncs", ops, wantOps)
	}
}

// Reloads that change a target while its disk hangs each leave a runner behind, and the
// later ones may get stuck on the same hang: the age reported is the oldest outstanding
// operation's, not the newest runner's (it read 0.4 s after 16 s frozen, holding back
// DiskprobeProbeStuck).
func TestInflightAgeSurvivesReloadsWhileStuck(t *testing.T) {
	newStuck := func(pred *runner) (r *runner, begun time.Time, unstick func()) {
		r = &runner{probes: []*probeRun{{name: "fsync"}}, predecessor: pred, workerDone: make(chan struct{})}
		r.status.current.Store(-1)
		hung, started := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(r.workerDone)
			r.status.track(0, func() { close(started); <-hung })
		}()
		<-started
		return r, time.Now(), func() { close(hung); <-r.workerDone }
	}
	first, firstBegun, unstickFirst := newStuck(nil)
	time.Sleep(20 * time.Millisecond)
	secondLaunched := time.Now()
	second, _, unstickSecond := newStuck(first)
	third := &runner{probes: []*probeRun{{name: "fsync"}}, predecessor: second, workerDone: make(chan struct{})}
	third.status.current.Store(-1)

	now := time.Now()
	if name, age := third.outstanding(now); name != "fsync" || age < now.Sub(firstBegun) {
		t.Errorf("after two reloads: %s stuck %v, want fsync stuck at least %v, since the first runner's operation", name, age, now.Sub(firstBegun))
	}
	unstickFirst() // the first hang returns: the second's is what is left
	now = time.Now()
	if _, age := third.outstanding(now); age <= 0 || age > now.Sub(secondLaunched) {
		t.Errorf("after the first returned: stuck %v, want the second's, at most %v", age, now.Sub(secondLaunched))
	}
	unstickSecond()
	if name, age := third.outstanding(time.Now()); name != "" || age != 0 {
		t.Errorf("all returned: %s stuck %v, want idle", name, age)
	}
}
