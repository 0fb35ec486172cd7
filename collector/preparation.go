package collector

import (
	"fmt"
	"slices"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// sharedReads is what the read probes of a target share, the whole device or the read
// probe file, which their rounds prepare (probe.ReadSource). Part of the worker's state.
type sharedReads struct {
	source *probe.ReadSource
}

// open opens the source on first use by a read probe.
func (f *sharedReads) open(w *worker) (*probe.ReadSource, error) {
	var err error
	switch {
	case f.source != nil:
	case w.target.Type == config.TypeBlockDevice:
		f.source, err = probe.OpenDevice(w.target.Path, w.fallbackAlign())
	default:
		f.source, err = probe.NewReadFile(w.target.ProbeRoot(), w.target.ReadFileSize(), w.target.Limits.MinFree, w.fallbackAlign())
	}
	return f.source, err
}

func (f *sharedReads) close() {
	if f.source != nil {
		_ = f.source.Close()
	}
}

// A probe file, the read probe file or the commit probe's, is prepared by rounds of the
// probes that use it: a round that finds its file not ready writes one bounded step of it
// and returns probe.ErrNotPrepared with how far the file is (Result.Filling). The probe
// is then preparing: the worker runs its next rounds between the scheduled ones, as soon
// as none is due, until one probes (or fails), so that a probe starts as soon as its file
// is ready rather than an interval per step later. A scheduled round that prepared
// instead of probing is counted skipped as preparing; the steps between them are not
// rounds of the schedule and count nothing but their I/O. The steps go through the same
// round as any other (the disk's lock, the filesystem check, the budget, the in-flight
// mark), and the probe with the lowest index steps first, so that the read probes' shared
// file is written by one of them at a time.

// prepared settles a round that took a step of its file's preparation.
func (w *worker) prepared(pr *probeRun, scheduled bool) {
	if scheduled {
		pr.skip(SkipPreparing)
	}
	i, found := slices.BinarySearchFunc(w.preparing, pr.index, func(p *probeRun, index int32) int { return int(p.index - index) })
	if !found {
		w.preparing = slices.Insert(w.preparing, i, pr)
	}
}

// stopPreparing takes pr off the preparing probes, as its round starts: only a round
// that prepared puts it back, so a failure waits for the next scheduled round.
func (w *worker) stopPreparing(pr *probeRun) {
	w.preparing = slices.DeleteFunc(w.preparing, func(p *probeRun) bool { return p == pr })
}

// logFilling logs a preparation's progress, a line per quarter of the file, and its end
// (or the reuse of an earlier run's file), from a round's Result.Filling.
func (w *worker) logFilling(fl probe.Filling) {
	if fl.Path == "" {
		return
	}
	log := w.r.logger
	switch {
	case fl.Done && fl.Reused:
		log.Info(fmt.Sprintf("reusing the prepared %s probe file", fl.File), "path", fl.Path)
	case fl.Done:
		log.Info(fmt.Sprintf("%s probe file prepared", fl.File), "path", fl.Path)
	default:
		if w.logged == nil {
			w.logged = map[string]float64{}
		}
		if last, ok := w.logged[fl.Path]; !ok || fl.Progress-last >= 0.25 {
			w.logged[fl.Path] = fl.Progress
			log.Info(fmt.Sprintf("preparing the %s probe file", fl.File), "path", fl.Path, "progress", int(fl.Progress*100))
		}
		return
	}
	delete(w.logged, fl.Path)
}
