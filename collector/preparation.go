package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// sharedReads is what the read probes of a target share, the whole device or the read probe
// file, and the preparation of that file: the worker writes it in bounded steps between
// rounds, before the first read. Part of the worker's state.
type sharedReads struct {
	source *probe.ReadSource
	err    error   // why the source could not be opened or prepared; the next read round reports it
	logged float64 // preparation progress last logged
	// waiting are the read probes whose round was skipped because the file was not
	// ready: they run as soon as it is rather than a whole interval later.
	waiting []*probeRun
}

// open opens the source on first use by a read probe.
func (f *sharedReads) open(w *worker) (*probe.ReadSource, error) {
	var err error
	switch {
	case f.source != nil:
	case w.target.Kind == config.KindBlockDevice:
		f.source, err = probe.OpenDevice(w.target.Path, w.fallbackAlign())
	default:
		f.source, err = probe.NewReadFile(w.target.ProbeRoot(), w.target.ReadFileSize(), w.target.Limits.MinFree, w.fallbackAlign())
	}
	return f.source, err
}

// nextWaiting takes, once the file is ready, a read round that was skipped while it was
// prepared: after a start (even with a file that only needs reopening) the first seqread
// round would otherwise come 10 minutes later. nil when there is none.
func (f *sharedReads) nextWaiting() *probeRun {
	for len(f.waiting) > 0 && f.source != nil && f.source.Ready() {
		pr := f.waiting[0]
		f.waiting = f.waiting[1:]
		if pr.pending.CompareAndSwap(false, true) { // else a round is queued already
			return pr
		}
	}
	return nil
}

// unfinished says whether the worker has preparation steps to take between rounds.
func (f *sharedReads) unfinished() bool {
	return f.source != nil && !f.source.Ready() && f.err == nil
}

func (f *sharedReads) close() {
	if f.source != nil {
		_ = f.source.Close()
	}
}

// prepareStep writes one bounded step of the read probe file, accounted to the first read
// probe; once the file is ready, the worker runs the rounds that waited for it (next).
func (w *worker) prepareStep() {
	r, f := w.r, &w.reads
	pr := w.readProbe()
	if err := w.checkFilesystem(pr); err != nil {
		f.err = err // the next read round reports it
		return
	}
	var (
		res  probe.Result
		done bool
		err  error
	)
	if !w.withDevice(pr, func() { res, done, err = f.source.PrepareStep(r.ctx, &pr.env) }) || r.ctx.Err() != nil {
		return
	}
	w.account(pr, res)
	switch {
	case err != nil:
		// Reported by the next read round, which counts it and logs it once per change
		// of state (a foreign file or a full disk fails every retry the same way).
		f.err = fmt.Errorf("preparing the read probe file: %w", err)
	case done && f.source.Reused():
		r.logger.Info("reusing the prepared read probe file", "path", f.source.Path())
	case done:
		r.logger.Info("read probe file prepared", "path", f.source.Path())
	default:
		if p := f.source.Progress(); p-f.logged >= 0.25 || f.logged == 0 {
			f.logged = p
			r.logger.Info("preparing the read probe file", "path", f.source.Path(), "progress", int(p*100))
		}
	}
}

// notPrepared settles a read round that found the file not ready: the preparation's
// error, when there is one, is the round's outcome, and is retried once per read round.
func (w *worker) notPrepared(pr *probeRun) {
	f := &w.reads
	switch {
	case errors.Is(f.err, probe.ErrLowFreeSpace):
		pr.skip(SkipLowFreeSpace) // as for the write probes: the floor is not an error
		w.noteError(pr, f.err, slog.LevelWarn)
	case f.err != nil:
		pr.runs.Inc()
		w.fail(pr, f.err)
	default:
		pr.skip(SkipPreparing)
		if !slices.Contains(f.waiting, pr) {
			f.waiting = append(f.waiting, pr)
		}
		return
	}
	f.err = nil
}

// readProbe is the probe the preparation is accounted to: the first that reads the file.
func (w *worker) readProbe() *probeRun {
	for _, pr := range w.r.probes {
		if config.LookupProbe(pr.name).ReadsSource {
			return pr
		}
	}
	return w.r.probes[0]
}

// fillingOwn settles a round of a probe that fills a file of its own (commit) and has not
// finished it: the round wrote one step and is counted skipped once, at the first step;
// its next step runs as soon as no round is due (worker.next).
func (w *worker) fillingOwn(pr *probeRun) {
	if !pr.filling {
		pr.filling = true
		pr.skip(SkipPreparing)
		w.r.logger.Info("preparing the probe file", "probe", pr.name)
	}
	w.filling = append(w.filling, pr)
}
