package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// runner probes one target. It has two goroutines whatever the disk does: the schedule
// loop, which only ever waits on timers, and the I/O worker, the single goroutine that
// touches the target's disk. An operation stuck in the kernel blocks the worker alone;
// the schedule loop goes on counting skipped rounds, and /metrics reads the age of the
// stuck operation from an atomic. The one exception is a path that did not answer when
// the target was configured: the Resolver's call on it is the goroutine that hangs, and
// the worker waits for that call rather than making a second one.
type runner struct {
	name    string
	timeout time.Duration // limits.timeout, read by the schedule loop
	target  config.Target // resolved; the worker's once started
	parsed  config.Target // as the file says it, for reloads to compare
	dev     device.Info
	devOK   bool
	paths   device.Paths
	lock    chan struct{} // shared by the targets on the same disk
	disk    *diskActivity // shared like lock; guarded by it
	clock   Clock
	logger  *slog.Logger
	metrics *Metrics
	budget  *Budget
	fs      filesystemPin // a directory target's filesystem at start

	// A target whose path did not answer when it was configured is resolved by its worker,
	// as the first operation of its first round (see resolveOnWorker).
	isResolved atomic.Bool
	// worked: a round of one of its probes has succeeded since the runner started
	// (/-/ready, see brokenBy).
	worked atomic.Bool

	// predecessor is the runner this one replaced on a reload while its worker was stuck
	// in the kernel: until that worker returns, its operation is this target's.
	predecessor *runner
	file        string
	resolver    *Resolver
	diskFor     func(key string) (chan struct{}, *diskActivity)

	probes   []*probeRun
	work     chan *probeRun
	inflight probe.Inflight
	current  atomic.Int32 // index into probes of the running round, -1 when idle

	// Worker-only state.
	prep        readFile        // the read probes' file or device, and its preparation
	noticed     map[string]bool // notices from the probes, logged once each
	contextMark contextMark     // where device context was last published

	stuck bool // the outstanding operation was reported past limits.timeout (schedule loop only)

	// retired is set when the runner is stopped (halt), under publishMu, which every
	// write that can create one of the target's series takes (publish): a worker that
	// answers after its target was replaced or removed by a reload, or after shutdown,
	// can then no longer bring back series the reload deleted or replaced, such as a
	// target_info with the old path.
	publishMu sync.Mutex
	retired   bool

	cancel       context.CancelFunc
	scheduleDone chan struct{}
	workerDone   chan struct{}
}

// probeRun is one probe kind on one target, with its metric children resolved once.
type probeRun struct {
	name     string
	index    int32
	interval time.Duration
	next     time.Time
	pending  atomic.Bool // a round is queued or running

	config  *config.ProbeConfig
	build   func(r *runner, c *config.ProbeConfig) (probe.Prober, error)
	prober  probe.Prober
	env     probe.Env
	lastErr string

	// finished: a round has ended, in success or error; permanent: the error of the last
	// one when it will not pass by itself (see permanent), else nil. For /-/ready.
	finished  atomic.Bool
	permanent atomic.Pointer[string]

	runs, errs, ioOps, ioBytes prometheus.Counter
	lastSuccess                prometheus.Gauge
	onSuccess                  func(probe.Result) // set by the kind's recorder, when its rounds add up
	// skip counts a round not run, by reason. Its series come into being at the first
	// skip rather than at 0: rounds are rarely skipped, and three reasons per probe that
	// stay 0 were a tenth of every scrape.
	skip func(reason string)
}

func newRunner(t config.Target, dev device.Info, devOK bool, paths device.Paths, lock chan struct{}, m *Metrics, clock Clock, logger *slog.Logger) *runner {
	r := &runner{
		name: t.Name, timeout: t.Limits.Timeout, target: t, parsed: t, dev: dev, devOK: devOK, paths: paths, lock: lock, disk: newDiskActivity(), clock: clock, metrics: m,
		logger: logger.With("target", t.Name),
		budget: NewBudget(t.Limits, largestBlock(&t)),
	}
	r.current.Store(-1)
	r.isResolved.Store(true)
	for _, name := range t.Probes() {
		kind := probeKinds[name]
		pr := &probeRun{name: name, index: int32(len(r.probes)), interval: t.Interval(name), config: t.Probe[name], build: kind.build}
		pr.runs = m.runs.WithLabelValues(t.Name, name)
		pr.errs = m.errors.WithLabelValues(t.Name, name)
		pr.ioOps = m.ioOps.WithLabelValues(t.Name, name)
		pr.ioBytes = m.ioBytes.WithLabelValues(t.Name, name)
		pr.skip = func(reason string) { r.publish(func() { m.skipped.WithLabelValues(t.Name, name, reason).Inc() }) }
		pr.lastSuccess = m.lastSuccess.WithLabelValues(t.Name, name)
		pr.env = probe.Env{Budget: r.budget, Inflight: &r.inflight, Notice: r.notice}
		m.recorders[name](t.Name, pr)
		r.probes = append(r.probes, pr)
	}
	r.work = make(chan *probeRun, len(r.probes))
	return r
}

func (r *runner) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.scheduleDone = make(chan struct{})
	r.workerDone = make(chan struct{})
	now := r.clock.Now()
	for _, pr := range r.probes {
		// Start soon, staggered, so a new target shows samples within seconds.
		pr.next = now.Add(time.Duration(rand.Int64N(int64(min(pr.interval, 2*time.Second)))))
	}
	go r.schedule(ctx)
	go r.worker(ctx)
}

// halt tells both goroutines to end and retires the runner: from then on it publishes
// nothing. It does not wait.
func (r *runner) halt() {
	r.cancel() // first: a worker that finds itself retired finds its context done too
	r.publishMu.Lock()
	r.retired = true
	r.publishMu.Unlock()
}

// publish runs fn, which writes the target's series, unless the runner is retired.
func (r *runner) publish(fn func()) bool {
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
		r.logger.Warn("abandoning an I/O operation stuck in the kernel", "age", r.inflight.Age(time.Now()).Round(time.Millisecond))
		return false
	}
}

// stuckPredecessor is the predecessor while its worker is still stuck, else nil.
func (r *runner) stuckPredecessor() *runner {
	if p := r.predecessor; p != nil {
		select {
		case <-p.workerDone:
		default:
			return p
		}
	}
	return nil
}

// outstanding is the target's outstanding operation: which probe, and since when (0
// when idle), this runner's own or, while it waits behind it, its stuck predecessor's.
func (r *runner) outstanding(now time.Time) (probe string, age time.Duration) {
	for _, x := range []*runner{r, r.stuckPredecessor()} {
		if x == nil {
			continue
		}
		// The index first: the age of an operation that ends meanwhile reads 0.
		if i := x.current.Load(); i >= 0 {
			if age := x.inflight.Age(now); age > 0 {
				return x.probes[i].name, age
			}
		}
	}
	return "", 0
}

// jittered spreads rounds by ±10 % so that targets and hosts do not fall into step.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

func (r *runner) schedule(ctx context.Context) {
	defer close(r.scheduleDone)
	for {
		next := r.probes[0].next
		for _, pr := range r.probes[1:] {
			if pr.next.Before(next) {
				next = pr.next
			}
		}
		timer := r.clock.NewTimer(next.Sub(r.clock.Now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		now := r.clock.Now()
		for _, pr := range r.probes {
			if now.Before(pr.next) {
				continue
			}
			pr.next = pr.next.Add(jittered(pr.interval))
			if pr.next.Before(now) { // fell far behind (suspended machine): do not catch up in a burst
				pr.next = now.Add(jittered(pr.interval))
			}
			r.due(pr, now)
		}
	}
}

// due hands a round to the worker, or skips it while the previous one is still queued or
// running (at most one operation is ever outstanding per target).
func (r *runner) due(pr *probeRun, now time.Time) {
	r.checkStuck(now)
	if !pr.pending.CompareAndSwap(false, true) { // the worker may start a waiting round itself
		pr.skip(SkipInflight)
		return
	}
	r.work <- pr // never blocks: one slot per probe, and a probe holds at most one
}

// checkStuck counts and logs, once per operation, an operation past limits.timeout.
func (r *runner) checkStuck(now time.Time) {
	age := r.inflight.Age(now)
	i := r.current.Load()
	switch {
	case age > r.timeout && !r.stuck && i >= 0:
		r.stuck = true
		pr := r.probes[i]
		pr.errs.Inc()
		r.logger.Error("I/O operation stuck in the kernel; skipping rounds until it returns", "probe", pr.name, "age", age.Round(time.Second), "timeout", r.timeout)
	case age <= r.timeout && r.stuck:
		r.stuck = false
		r.logger.Info("the stuck I/O operation returned; probing again")
	}
}

func (r *runner) worker(ctx context.Context) {
	defer close(r.workerDone)
	defer r.closeProbes()
	for {
		if r.prep.unfinished() {
			select {
			case pr := <-r.work:
				r.run(ctx, pr)
			case <-ctx.Done():
				return
			default:
				r.prepareStep(ctx)
			}
			continue
		}
		select {
		case pr := <-r.work:
			r.run(ctx, pr)
		case <-ctx.Done():
			return
		}
	}
}

func (r *runner) closeProbes() {
	for _, pr := range r.probes {
		if pr.prober != nil {
			_ = pr.prober.Close()
		}
	}
	r.prep.close()
}

// withDevice holds the disk's lock around one unit of I/O and samples the device's
// counters before and after, so that device context covers the gaps between our I/O.
func (r *runner) withDevice(ctx context.Context, index int32, fn func()) bool {
	select {
	case r.lock <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-r.lock }()
	if r.devOK {
		r.disk.unitStarts(r.paths, r.dev.Name, r.clock.Now())
		r.publishDeviceContext()
	}
	r.current.Store(index)
	fn()
	r.current.Store(-1)
	if r.devOK {
		r.disk.unitEnded(r.paths, r.clock.Now())
	}
	return true
}

// publishDeviceContext sets the busy ratio and others' IOPS from the gaps between the
// prober's units on the disk (of every target on it) since the last time they were set.
func (r *runner) publishDeviceContext() {
	others, wall, ok := r.disk.since(&r.contextMark, r.dev.Name)
	if !ok {
		return
	}
	busy := float64(others.IOTicks) / float64(wall)
	ios := others.ReadIOs + others.WriteIOs + others.DiscardIOs + others.FlushIOs
	r.publish(func() {
		r.metrics.busy.WithLabelValues(r.name).Set(min(max(busy, 0), 1))
		r.metrics.otherIOPS.WithLabelValues(r.name).Set(float64(ios) / wall.Seconds())
	})
}

// resolved takes what the target's path answered: its kind, device and filesystem. It
// takes nothing once the runner is retired (false): a reload may have given the target
// another path, or removed it, since the path was asked.
func (r *runner) resolved(res resolution) bool {
	return r.publish(func() {
		r.target = res.target
		r.dev, r.devOK = res.dev, res.devErr == nil
		r.fs = res.pin
		key := "path:" + res.target.Path
		if r.devOK {
			key = r.dev.Disk
		}
		r.lock, r.disk = r.diskFor(key)
		t := res.target
		r.metrics.targetInfo.WithLabelValues(t.Name, t.Path, string(t.Kind), r.dev.Name, r.dev.Model, r.dev.Serial, boolLabel(r.dev.Rotational)).Set(1)
		if !r.devOK {
			r.logger.Warn("no device context for target", "path", t.Path, "err", res.devErr)
		}
		if t.ProbeDirInside() {
			r.logger.Info("probe files are inside the measured path, the root of its filesystem: if it is etcd's data directory, etcd warns about this entry at each start and otherwise ignores it",
				"probe_dir", t.ProbeDir, "etcd_warning", t.EtcdWarning())
		}
		r.isResolved.Store(true)
	})
}

// resolveOnWorker asks the target's path what it is, for a target whose path did not
// answer when it was configured. It is the round's first operation: while the path hangs
// its age shows in diskprobe_probe_inflight_seconds, rounds due meanwhile are skipped, and
// the wait is the one call outstanding on that path (the Resolver's), not another.
func (r *runner) resolveOnWorker(ctx context.Context, pr *probeRun) error {
	var (
		res resolution
		ok  bool
	)
	r.current.Store(pr.index)
	r.inflight.Do(func() { res, ok = r.resolver.resolve(ctx, r.file, r.parsed, 0) })
	r.current.Store(-1)
	switch {
	case !ok:
		return ctx.Err()
	case res.err != nil:
		return res.err
	case fmt.Sprint(res.target.Probes()) != fmt.Sprint(r.target.Probes()):
		return fmt.Errorf("%s turned out to be a %s when it answered, with other default probes (%v) than a directory's: reload or restart the exporter to probe it as one",
			res.target.Path, res.target.Kind, res.target.Probes())
	}
	if !r.resolved(res) {
		return context.Canceled // stopped meanwhile; halt cancelled ctx before it retired r
	}
	r.logger.Info("the target's path answered; probing it", "path", r.target.Path, "kind", r.target.Kind, "device", r.dev.Name)
	return nil
}

// checkFilesystem is the per-round check that the target is still on the filesystem it
// was on at start. Its stat hangs on a hung mount like any probe call: it is the round's
// outstanding operation.
func (r *runner) checkFilesystem(pr *probeRun) (err error) {
	r.current.Store(pr.index)
	r.inflight.Do(func() { err = r.fs.check() })
	r.current.Store(-1)
	return err
}

// run does one round of a probe.
func (r *runner) run(ctx context.Context, pr *probeRun) {
	defer pr.pending.Store(false)
	if !r.isResolved.Load() {
		if err := r.resolveOnWorker(ctx, pr); err != nil {
			if ctx.Err() == nil {
				pr.runs.Inc()
				r.fail(pr, err)
			}
			return
		}
	}
	if err := r.checkFilesystem(pr); err != nil {
		pr.runs.Inc()
		r.fail(pr, err)
		return
	}
	var moved *filesystemChangedError
	if errors.As(r.prep.err, &moved) {
		r.prep.err = nil // back on its filesystem: preparation may go on
	}
	if pr.prober == nil {
		var (
			p   probe.Prober
			err error
		)
		r.current.Store(pr.index)
		r.inflight.Do(func() { p, err = pr.build(r, pr.config) })
		r.current.Store(-1)
		if err != nil {
			pr.runs.Inc()
			r.fail(pr, err)
			return
		}
		pr.prober = p
	}
	var (
		res probe.Result
		err error
	)
	if !r.withDevice(ctx, pr.index, func() { res, err = pr.prober.Round(ctx, &pr.env) }) || ctx.Err() != nil {
		return // shutting down
	}
	r.account(pr, res)
	switch {
	case errors.Is(err, probe.ErrNotPrepared):
		r.notPrepared(pr)
	case errors.Is(err, probe.ErrLowFreeSpace):
		pr.skip(SkipLowFreeSpace)
		r.noteError(pr, err, slog.LevelWarn)
	case err != nil:
		pr.runs.Inc()
		r.fail(pr, err)
	default:
		// The timestamp first: a scrape between the two must not see a counted success
		// whose time is still the previous one's.
		pr.lastSuccess.Set(float64(r.clock.Now().UnixNano()) / 1e9)
		pr.runs.Inc()
		r.worked.Store(true)
		pr.ended(nil)
		if pr.onSuccess != nil {
			pr.onSuccess(res)
		}
		if pr.lastErr != "" {
			r.logger.Info("probe recovered", "probe", pr.name)
			pr.lastErr = ""
		}
	}
}

// account adds what a round did, failed or not, as its timed calls were observed. The
// CPU wait's series comes into being at the first round that measured it, through
// publish: where the kernel does not report it the series stays absent rather than 0,
// and a retired runner cannot bring it back.
func (r *runner) account(pr *probeRun, res probe.Result) {
	if res.Ops > 0 {
		pr.ioOps.Add(float64(res.Ops))
		pr.ioBytes.Add(float64(res.Bytes))
	}
	if res.CPUWaitKnown {
		r.publish(func() { r.metrics.cpuWait.WithLabelValues(r.name, pr.name).Add(res.CPUWait.Seconds()) })
	}
}

func (r *runner) fail(pr *probeRun, err error) {
	pr.errs.Inc()
	r.noteError(pr, err, slog.LevelError)
}

// noteError logs an error when it differs from the probe's last one, so a failing disk
// gives one line per change of state, not one per round. Being under the free-space
// floor is one state, however many MiB are free from round to round.
func (r *runner) noteError(pr *probeRun, err error, level slog.Level) {
	pr.ended(err)
	state := err.Error()
	if errors.Is(err, probe.ErrLowFreeSpace) {
		state = probe.ErrLowFreeSpace.Error()
	}
	if state != pr.lastErr {
		pr.lastErr = state
		r.logger.Log(context.Background(), level, "probe failed", "probe", pr.name, "err", err)
	}
}

// ended records how a round ended, for brokenBy.
func (pr *probeRun) ended(err error) {
	if err != nil && permanent(err) {
		msg := err.Error()
		pr.permanent.Store(&msg)
	} else {
		pr.permanent.Store(nil)
	}
	pr.finished.Store(true)
}

// permanent is whether a round's error will not pass by itself: permission denied or a
// read-only filesystem wait for an operator (a ReadWritePaths= drop-in, a chown, the
// disk group). A free-space floor, an I/O error, a timeout may pass, and are the disk's
// state, which the metrics report.
func permanent(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// brokenBy is why the target has not worked since it started, when that will not pass
// by itself: no round of it has succeeded, and the last round of every probe that has
// finished one failed with a permanent error. "" otherwise, also before any round ended.
// Once a round has succeeded, later failures are the disk's (ext4 remounts itself
// read-only on errors): the metrics and alerts report them, not /-/ready.
func (r *runner) brokenBy() string {
	if r.worked.Load() {
		return ""
	}
	why := ""
	for _, pr := range r.probes {
		if !pr.finished.Load() {
			continue
		}
		msg := pr.permanent.Load()
		if msg == nil {
			return ""
		}
		if why == "" {
			why = pr.name + ": " + *msg
		}
	}
	return why
}

// notice logs, once per target, what a probe does differently on this filesystem.
func (r *runner) notice(msg string) {
	if r.noticed[msg] {
		return
	}
	if r.noticed == nil {
		r.noticed = map[string]bool{}
	}
	r.noticed[msg] = true
	r.logger.Warn(msg, "path", r.target.ProbeRoot())
}
