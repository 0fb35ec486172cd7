package collector

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// runner probes one target. It has two goroutines whatever the disk does: the schedule
// loop, which only ever waits on timers, and the I/O worker, the single goroutine that
// touches the target's disk. An operation stuck in the kernel blocks the worker alone;
// the schedule loop goes on counting skipped rounds, and /metrics reads the age of the
// stuck operation from an atomic. The one exception is a path that did not answer when
// the target was configured: the Inspector's call on it is the goroutine that hangs, and
// the worker waits for that call rather than making a second one.
//
// Each field has one owner, named beside it: what newRunner sets and nothing writes
// after; status, the atomics scrapes read; loop and worker, each the state of one of
// the two goroutines, whose methods only that goroutine calls.
type runner struct {
	// Set by newRunner and never written again: any goroutine reads them.
	*shared               // what every runner of the Scheduler shares
	name    string        // the target's
	parsed  config.Target // as the file says it, for reloads to compare
	file    string        // the configuration file, for errors found when the path answers late
	timeout time.Duration // limits.timeout
	logger  *slog.Logger  // the shared one, with the target's name
	probes  []*probeRun
	work    chan *probeRun // rounds the schedule loop hands the worker
	// predecessor is the runner this one replaced on a reload while its worker was stuck
	// in the kernel: until that worker returns, its operation is this target's.
	predecessor *runner
	ctx         context.Context // both goroutines'; halt cancels it
	cancel      context.CancelFunc
	// Closed by the schedule loop and by the worker as they end.
	scheduleDone, workerDone chan struct{}
	// vantage is the target's vantage, nil without one: set by newRunner; then the
	// worker calls its methods and scrapes read its state.
	vantage *vantageRun

	status status       // written by the worker, read by scrapes and /-/ready
	loop   scheduleLoop // the schedule loop goroutine's
	worker worker       // the worker goroutine's

	// retired is set by halt, on the Scheduler's goroutine, under publishMu, which every
	// write that can create one of the target's series takes (publish): a worker that
	// answers after its target was replaced or removed by a reload, or after shutdown,
	// can then no longer bring back series the reload deleted or replaced, such as a
	// target_info with the old path.
	publishMu sync.Mutex
	retired   bool
}

// status is what scrapes and /-/ready read of a runner while it probes: atomics, so that
// reading them never waits on the disk. The worker writes them.
type status struct {
	current   atomic.Int32   // index into probes of the outstanding operation's probe, -1 when idle
	inflight  probe.Inflight // when the outstanding operation started
	inspected atomic.Bool    // the target's path has answered (see worker.inspect)
	worked    atomic.Bool    // a round has succeeded since the runner started (see brokenBy)
}

// track runs fn, one operation of probe index on the target, as the outstanding one.
func (s *status) track(index int32, fn func()) {
	s.current.Store(index)
	s.inflight.Do(fn)
	s.current.Store(-1)
}

// probeRun is one probe kind on one target, with its metric children looked up once.
// newRunner fills it; after that only pending and status change.
type probeRun struct {
	name     string
	index    int32 // in runner.probes
	interval time.Duration
	config   *config.ProbeConfig
	build    func(w *worker, c *config.ProbeConfig) (probe.Prober, error)
	env      probe.Env // its Observe records samples into the kind's histograms (Metrics.record)

	runs, errs, ioOps, ioBytes prometheus.Counter
	lastSuccess                prometheus.Gauge
	throughput                 *throughput // where its successful rounds add up, for a kind that has one
	// skip counts a round not run, by reason. Its series come into being at the first
	// skip rather than at 0: rounds are rarely skipped, and three reasons per probe that
	// stay 0 were a tenth of every scrape.
	skip func(reason string)

	// pending: a scheduled round is queued or running. The schedule loop sets it as it
	// hands the round over, the worker clears it when the round ends; the preparation
	// steps the worker takes between rounds (worker.preparing) leave it alone.
	pending atomic.Bool
	status  probeStatus
}

// probeStatus is how a probe's rounds end, for /-/ready (brokenBy): the worker writes it.
type probeStatus struct {
	// finished: a round has ended, in success or error; permanent: the error of the last
	// one when it will not pass by itself (see permanent), else nil.
	finished  atomic.Bool
	permanent atomic.Pointer[string]
	// refused: the error of the last round when it refused something at the probe's
	// paths that is not the exporter's (refused), else nil.
	refused atomic.Pointer[string]
}

// newRunner builds the runner of a planned target of file, ready to start: with what
// its path answered or, when it did not answer, as a directory whose worker asks the
// path again first. predecessor is the runner it replaces while that one's worker is
// stuck, or nil.
func newRunner(sh *shared, file string, pt planned, predecessor *runner) *runner {
	t := pt.parsed.AssumedDirectory()
	if pt.res != nil {
		t = pt.res.Target
	}
	names := t.ProbeNames()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{shared: sh, name: t.Name, parsed: pt.parsed, file: file, timeout: t.Limits.Timeout,
		logger: sh.logger.With("target", t.Name), work: make(chan *probeRun, len(names)), predecessor: predecessor,
		ctx: ctx, cancel: cancel, scheduleDone: make(chan struct{}), workerDone: make(chan struct{})}
	r.status.current.Store(-1)
	r.loop = scheduleLoop{r: r}
	r.vantage = newVantageRun(t.Vantage, sh.paths, r.logger)
	r.worker = worker{r: r, target: t, probers: make([]probe.Prober, len(names)), lastErr: make([]string, len(names)),
		ceiling: newDeviceCeiling(sh.metrics, t)}
	budget := NewBudget(t.Limits, largestBlock(&t))
	now := sh.clock.Now()
	m := sh.metrics
	for i, name := range names {
		kind := config.LookupProbe(name)
		pr := &probeRun{
			name: name, index: int32(i), interval: t.Interval(name), config: t.Probe[name],
			build:       func(w *worker, c *config.ProbeConfig) (probe.Prober, error) { return build(w, kind, c) },
			env:         probe.Env{Budget: budget, Inflight: &r.status.inflight, Notice: r.worker.notice},
			runs:        m.runs.WithLabelValues(t.Name, name),
			errs:        m.errors.WithLabelValues(t.Name, name),
			ioOps:       m.ioOps.WithLabelValues(t.Name, name),
			ioBytes:     m.ioBytes.WithLabelValues(t.Name, name),
			lastSuccess: m.lastSuccess.WithLabelValues(t.Name, name),
			skip:        func(reason string) { r.unlessRetired(func() { m.skipped.WithLabelValues(t.Name, name, reason).Inc() }) },
		}
		m.record(kind, t.Name, pr)
		r.probes = append(r.probes, pr)
		// Start soon, staggered, so a new target shows samples within seconds.
		r.loop.next = append(r.loop.next, now.Add(time.Duration(rand.Int64N(int64(min(pr.interval, 2*time.Second))))))
	}
	if pt.res != nil {
		r.worker.inspected(*pt.res)
	} else {
		r.worker.disk = sh.diskFor(r.worker.diskKey())
	}
	return r
}

// start starts the schedule loop and the worker.
func (r *runner) start() {
	go r.loop.run()
	go r.worker.run()
}

// halt tells both goroutines to end and retires the runner: from then on it publishes
// nothing (unlessRetired). It does not wait.
func (r *runner) halt() {
	r.cancel() // first: a worker that finds itself retired finds its context done too
	r.publishMu.Lock()
	r.retired = true
	r.publishMu.Unlock()
}

// unlessRetired runs fn, which writes the target's series, unless the runner is retired.
func (r *runner) unlessRetired(fn func()) bool {
	r.publishMu.Lock()
	defer r.publishMu.Unlock()
	if r.retired {
		return false
	}
	fn()
	return true
}

// stop halts the runner and waits for its goroutines: for the worker until deadline is
// done, and no longer (a worker stuck in the kernel exits by itself when its I/O
// returns). It reports whether the worker ended.
func (r *runner) stop(deadline context.Context) bool {
	r.halt()
	<-r.scheduleDone // it only ever waits on timers
	select {
	case <-r.workerDone:
		return true
	case <-deadline.Done():
		r.logger.Warn("abandoning an I/O operation stuck in the kernel", "age", r.status.inflight.Age(time.Now()).Round(time.Millisecond))
		return false
	}
}

// stuckPredecessor is the nearest runner before this one, through the reloads that
// replaced it, whose worker is still stuck; nil when there is none.
func (r *runner) stuckPredecessor() *runner {
	for p := r.predecessor; p != nil; p = p.predecessor {
		select {
		case <-p.workerDone:
		default:
			return p
		}
	}
	return nil
}

// outstanding is the target's outstanding operation: which probe, and since when (0
// when idle), the oldest of this runner's own and those of the runners before it that
// are still stuck. Several reloads while the disk hangs each leave a runner behind, and
// the later ones may get stuck too, on the same hang: the target has been stuck since
// the first, and its age must not start again from zero at each reload (it did: 0.4 s
// after 16 s frozen), which would hold back DiskprobeProbeStuck.
func (r *runner) outstanding(now time.Time) (probe string, age time.Duration) {
	for x := r; x != nil; x = x.stuckPredecessor() {
		// The index first: the age of an operation that ends meanwhile reads 0.
		if i := x.status.current.Load(); i >= 0 {
			if a := x.status.inflight.Age(now); a > age {
				probe, age = x.probes[i].name, a
			}
		}
	}
	return probe, age
}

// brokenBy is why the target has not worked since it started, when that will not pass
// by itself: no round of it has succeeded, and the last round of every probe that has
// finished one failed with a permanent error. "" otherwise, also before any round ended.
// Once a round has succeeded, later failures are the disk's (ext4 remounts itself
// read-only on errors): the metrics and alerts report them, not /-/ready.
func (r *runner) brokenBy() string {
	if r.status.worked.Load() {
		return ""
	}
	why := ""
	for _, pr := range r.probes {
		if !pr.status.finished.Load() {
			continue
		}
		msg := pr.status.permanent.Load()
		if msg == nil {
			return ""
		}
		if why == "" {
			why = pr.name + ": " + *msg
		}
	}
	return why
}

// ended records how a round ended, for brokenBy.
func (pr *probeRun) ended(err error) {
	if err != nil && permanent(err) {
		msg := err.Error()
		pr.status.permanent.Store(&msg)
	} else {
		pr.status.permanent.Store(nil)
	}
	if err != nil && refused(err) {
		msg := err.Error()
		pr.status.refused.Store(&msg)
	} else {
		pr.status.refused.Store(nil)
	}
	pr.status.finished.Store(true)
}

// refused is whether a round's error is the exporter refusing to write something at its
// paths that is not its own: a file or directory someone put there, or a probe directory
// swapped while it was held. Whoever did that may be attacking the host; until an
// operator looks, /-/ready says so, whether or not the target ever worked.
func refused(err error) bool {
	var foreign *probe.ForeignFileError
	var replaced *probe.ReplacedDirError
	var unsafeRoot *probe.UnsafeRootError
	return errors.As(err, &foreign) || errors.As(err, &replaced) || errors.As(err, &unsafeRoot)
}

// refusedBy is why the target refuses to probe (see refused), "" when it does not.
func (r *runner) refusedBy() string {
	for _, pr := range r.probes {
		if msg := pr.status.refused.Load(); msg != nil {
			return pr.name + ": " + *msg
		}
	}
	return ""
}

// permanent is whether a round's error will not pass by itself: permission denied or a
// read-only filesystem wait for an operator (a ReadWritePaths= drop-in, a chown, the
// disk group). A free-space floor, an I/O error, a timeout may pass, and are the disk's
// state, which the metrics report.
func permanent(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// scheduleLoop is the state of a runner's schedule loop, the goroutine that hands the
// worker its rounds as they come due and notices an operation stuck past
// limits.timeout. It only ever waits on timers; only it calls these methods.
type scheduleLoop struct {
	r     *runner
	next  []time.Time // by probe index: when its next round is due
	stuck bool        // the outstanding operation was reported past limits.timeout
}

func (l *scheduleLoop) run() {
	r := l.r
	defer close(r.scheduleDone)
	for {
		timer := r.clock.NewTimer(slices.MinFunc(l.next, time.Time.Compare).Sub(r.clock.Now()))
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		now := r.clock.Now()
		for i, pr := range r.probes {
			if now.Before(l.next[i]) {
				continue
			}
			l.next[i] = l.next[i].Add(jittered(pr.interval))
			if l.next[i].Before(now) { // fell far behind (suspended machine): do not catch up in a burst
				l.next[i] = now.Add(jittered(pr.interval))
			}
			l.due(pr, now)
		}
	}
}

// jittered spreads rounds by ±10 % so that targets and hosts do not fall into step.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// due hands a round to the worker, or skips it while the previous one is still queued or
// running (at most one operation is ever outstanding per target).
func (l *scheduleLoop) due(pr *probeRun, now time.Time) {
	l.checkStuck(now)
	if !pr.pending.CompareAndSwap(false, true) { // the worker may start a waiting round itself
		pr.skip(SkipInflight)
		return
	}
	l.r.work <- pr // never blocks: one slot per probe, and a probe holds at most one
}

// checkStuck counts and logs, once per operation, an operation past limits.timeout.
func (l *scheduleLoop) checkStuck(now time.Time) {
	r := l.r
	age := r.status.inflight.Age(now)
	i := r.status.current.Load()
	switch {
	case age > r.timeout && !l.stuck && i >= 0:
		l.stuck = true
		pr := r.probes[i]
		pr.errs.Inc()
		r.logger.Error("I/O operation stuck in the kernel; skipping rounds until it returns", "probe", pr.name, "age", age.Round(time.Second), "timeout", r.timeout)
	case age <= r.timeout && l.stuck:
		l.stuck = false
		r.logger.Info("the stuck I/O operation returned; probing again")
	}
}
