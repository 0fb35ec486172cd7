package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// worker is the state of a runner's I/O worker, the one goroutine that touches the
// target's disk: only it calls these methods, and newRunner before it starts.
type worker struct {
	r *runner

	// What the target's path answered (inspected): from newRunner, or from the first
	// round when the path did not answer in time.
	target config.Target // with its type and the type's default probes
	dev    device.Info
	devOK  bool
	fs     inspect.Pin // a directory target's filesystem at start
	disk   *disk       // shared by the targets on the same disk

	probers []probe.Prober // by probe index, built by the probe's first round
	lastErr []string       // by probe index: the error last logged, "" since a success
	reads   sharedReads    // the read probes' file or device
	// preparing are the probes whose last round was a step of their file's preparation
	// (ErrNotPrepared), by probe index: the worker runs their next rounds between the
	// scheduled ones until one probes (preparation.go).
	preparing   []*probeRun
	logged      map[string]float64 // by probe file: the preparation's progress last logged
	noticed     map[string]bool    // notices from the probes, logged once each
	contextMark contextMark        // where device context was last published
	ceiling     deviceCeiling      // the device's ceiling and the volume's burst credit
}

func (w *worker) run() {
	defer close(w.r.workerDone)
	defer w.close()
	for pr, scheduled := w.next(); pr != nil; pr, scheduled = w.next() {
		w.round(pr, scheduled)
	}
}

// next waits for the next round to run: a scheduled one (scheduled), else, while a probe
// is preparing its file, that probe's next step; nil once the runner is halted.
func (w *worker) next() (pr *probeRun, scheduled bool) {
	r := w.r
	select {
	case pr := <-r.work:
		return pr, true
	default:
	}
	if len(w.preparing) > 0 && r.ctx.Err() == nil {
		return w.preparing[0], false
	}
	select {
	case pr := <-r.work:
		return pr, true
	case <-r.ctx.Done():
		return nil, false
	}
}

func (w *worker) close() {
	for _, p := range w.probers {
		if p != nil {
			_ = p.Close()
		}
	}
	w.reads.close()
	w.r.vantage.close()
}

// round runs one round of a probe: a scheduled one, or a step of its file's preparation
// between them.
func (w *worker) round(pr *probeRun, scheduled bool) {
	r := w.r
	if scheduled {
		defer pr.pending.Store(false)
	}
	w.stopPreparing(pr) // until the round says otherwise
	if !r.status.inspected.Load() {
		if err := w.inspect(pr); err != nil {
			if r.ctx.Err() == nil {
				pr.runs.Inc()
				w.fail(pr, err)
			}
			return
		}
	}
	if err := w.checkFilesystem(pr); err != nil {
		pr.runs.Inc()
		w.fail(pr, err)
		return
	}
	if w.probers[pr.index] == nil {
		var (
			p   probe.Prober
			err error
		)
		r.status.track(pr.index, func() { p, err = pr.build(w, pr.config) })
		if err != nil {
			pr.runs.Inc()
			w.fail(pr, err)
			return
		}
		w.probers[pr.index] = r.vantage.wrap(p)
	}
	var (
		res probe.Result
		err error
	)
	if !w.withDevice(pr, func() { res, err = w.probers[pr.index].Round(r.ctx, &pr.env) }) || r.ctx.Err() != nil {
		return // shutting down
	}
	w.account(pr, res)
	w.logFilling(res.Filling)
	switch {
	case errors.Is(err, probe.ErrNotPrepared):
		w.prepared(pr, scheduled)
	case errors.Is(err, errNoVantage): // logged by the vantage, once per change
		pr.skip(SkipNoVantage)
		pr.ended(nil)
	case errors.Is(err, probe.ErrLowFreeSpace):
		pr.skip(SkipLowFreeSpace)
		w.noteError(pr, err, slog.LevelWarn)
	case err != nil:
		pr.runs.Inc()
		w.fail(pr, err)
	default:
		// The timestamp first: a scrape between the two must not see a counted success
		// whose time is still the previous one's.
		pr.lastSuccess.Set(float64(r.clock.Now().UnixNano()) / 1e9)
		pr.runs.Inc()
		r.status.worked.Store(true)
		pr.ended(nil)
		if pr.throughput != nil {
			pr.throughput.add(res)
		}
		if w.lastErr[pr.index] != "" {
			r.logger.Info("probe recovered", "probe", pr.name)
			w.lastErr[pr.index] = ""
		}
	}
}

// inspect asks the target's path what it is (inspect.Target), for a target whose path
// did not answer when it was configured. It is the round's first operation: while the
// path hangs its age shows in diskprobe_probe_inflight_seconds, rounds due meanwhile are
// skipped, and the wait is the one call outstanding on that path (the Inspector's).
func (w *worker) inspect(pr *probeRun) error {
	r := w.r
	var (
		res inspect.Result
		ok  bool
	)
	r.status.track(pr.index, func() { res, ok = r.inspector.Target(r.ctx, r.file, r.parsed, 0) })
	switch {
	case !ok:
		return r.ctx.Err()
	case res.Err != nil:
		return res.Err
	case !slices.Equal(res.Target.ProbeNames(), w.target.ProbeNames()):
		return fmt.Errorf("%s turned out to be a %s when it answered, with other default probes (%v) than a directory's: reload or restart the exporter to probe it as one",
			res.Target.Path, res.Target.Type, res.Target.ProbeNames())
	}
	if !w.inspected(res) {
		return context.Canceled // stopped meanwhile; halt cancelled ctx before it retired r
	}
	r.logger.Info("the target's path answered; probing it", "path", w.target.Path, "kind", w.target.Type, "device", w.dev.Name)
	return nil
}

// inspected takes what the target's path answered: its type, device and filesystem. It
// takes nothing once the runner is retired (false): a reload may have given the target
// another path, or removed it, since the path was asked.
func (w *worker) inspected(res inspect.Result) bool {
	r := w.r
	return r.unlessRetired(func() {
		t := res.Target
		w.target, w.dev, w.devOK, w.fs = t, res.Device, res.DeviceErr == nil, res.Pin
		w.disk = r.diskFor(w.diskKey())
		r.metrics.targetInfo.WithLabelValues(t.Name, t.Path, string(t.Type), w.dev.Name, w.dev.Model, w.dev.Serial, boolLabel(w.dev.Rotational)).Set(1)
		if !w.devOK {
			r.logger.Warn("no device context for target", "path", t.Path, "err", res.DeviceErr)
		}
		if t.ProbeDirInside() {
			r.logger.Info("probe files are inside the measured path, the root of its filesystem: if it is etcd's data directory, etcd warns about this entry at each start and otherwise ignores it",
				"probe_dir", t.ProbeDir, "etcd_warning", t.EtcdWarning())
		}
		r.status.inspected.Store(true)
	})
}

// diskKey names the disk the target is on, for the lock and device context its targets
// share: the whole disk when its device is known, else the target's path.
func (w *worker) diskKey() string {
	if w.devOK {
		return w.dev.Disk
	}
	return "path:" + w.target.Path
}

// checkFilesystem is the per-round check that the target is still on the filesystem it
// was on at start. Its stat hangs on a hung mount like any probe call: it is the round's
// outstanding operation.
func (w *worker) checkFilesystem(pr *probeRun) (err error) {
	w.r.status.track(pr.index, func() { err = w.fs.Check() })
	return err
}

// withDevice holds the disk's lock around one unit of I/O and samples the device's
// counters before and after, so that device context covers the gaps between our I/O.
func (w *worker) withDevice(pr *probeRun, fn func()) bool {
	r := w.r
	select {
	case w.disk.lock <- struct{}{}:
	case <-r.ctx.Done():
		return false
	}
	defer func() { <-w.disk.lock }()
	if w.devOK {
		now := r.clock.Now()
		if s, ok := w.disk.unitStarts(r.paths, w.dev.Name, now); ok {
			w.observeDevice(now, s)
		}
		w.publishDeviceContext()
	}
	r.status.current.Store(pr.index)
	fn()
	r.status.current.Store(-1)
	if w.devOK {
		w.disk.unitEnded(r.paths, r.clock.Now())
	}
	return true
}

// publishDeviceContext sets the busy ratio and others' IOPS from the gaps between the
// prober's units on the disk (of every target on it) since the last time they were set.
func (w *worker) publishDeviceContext() {
	others, wall, ok := w.disk.since(&w.contextMark, w.dev.Name)
	if !ok {
		return
	}
	busy := float64(others.IOTicks) / float64(wall)
	ios := others.ReadIOs + others.WriteIOs + others.DiscardIOs + others.FlushIOs
	r := w.r
	r.unlessRetired(func() {
		r.metrics.busy.WithLabelValues(r.name).Set(min(max(busy, 0), 1))
		r.metrics.otherIOPS.WithLabelValues(r.name).Set(float64(ios) / wall.Seconds())
	})
}

// account adds what a round did, failed or not, as its timed calls were observed. The
// CPU wait's series comes into being at the first round that measured it, through
// publish: where the kernel does not report it the series stays absent rather than 0,
// and a retired runner cannot bring it back.
func (w *worker) account(pr *probeRun, res probe.Result) {
	w.ceiling.own(res)
	if res.Ops > 0 {
		pr.ioOps.Add(float64(res.Ops))
		pr.ioBytes.Add(float64(res.Bytes))
	}
	if res.CPUWaitKnown {
		r := w.r
		r.unlessRetired(func() { r.metrics.cpuWait.WithLabelValues(r.name, pr.name).Add(res.CPUWait.Seconds()) })
	}
}

func (w *worker) fail(pr *probeRun, err error) {
	pr.errs.Inc()
	w.noteError(pr, err, slog.LevelError)
}

// noteError logs an error when it differs from the probe's last one, so a failing disk
// gives one line per change of state, not one per round. Being under the free-space
// floor is one state, however many MiB are free from round to round.
func (w *worker) noteError(pr *probeRun, err error, level slog.Level) {
	pr.ended(err)
	state := err.Error()
	if errors.Is(err, probe.ErrLowFreeSpace) {
		state = probe.ErrLowFreeSpace.Error()
	}
	if state != w.lastErr[pr.index] {
		w.lastErr[pr.index] = state
		w.r.logger.Log(context.Background(), level, "probe failed", "probe", pr.name, "err", err)
	}
}

// notice logs, once per target, what a probe does differently on this filesystem.
func (w *worker) notice(msg string) {
	if w.noticed[msg] {
		return
	}
	if w.noticed == nil {
		w.noticed = map[string]bool{}
	}
	w.noticed[msg] = true
	w.r.logger.Warn(msg, "path", w.target.ProbeRoot())
}
