// Package collector schedules the probes of every target under hard rate limits and
// turns their results into Prometheus metrics. It never does raw I/O itself: that is
// the probe package's job.
package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Scheduler runs one runner per target and swaps them on reload.
type Scheduler struct {
	metrics *Metrics
	paths   device.Paths
	clock   Clock
	logger  *slog.Logger

	mu      sync.Mutex
	runners map[string]*runner
	locks   map[string]chan struct{} // per disk; kept across reloads
	disks   map[string]*diskActivity // per disk, like locks

	// snapshot is the runners for scrapes, which must never wait on mu: Stop holds it
	// while it waits for I/O workers.
	snapshot atomic.Pointer[[]*runner]
}

func (s *Scheduler) running() []*runner {
	if p := s.snapshot.Load(); p != nil {
		return *p
	}
	return nil
}

// publish refreshes the scrape snapshot; mu must be held.
func (s *Scheduler) publish() {
	rs := make([]*runner, 0, len(s.runners))
	for _, r := range s.runners {
		rs = append(rs, r)
	}
	s.snapshot.Store(&rs)
}

// NewScheduler creates a scheduler with no targets; Apply gives it some.
func NewScheduler(m *Metrics, paths device.Paths, clock Clock, logger *slog.Logger) *Scheduler {
	s := &Scheduler{metrics: m, paths: paths, clock: clock, logger: logger,
		runners: map[string]*runner{}, locks: map[string]chan struct{}{}, disks: map[string]*diskActivity{}}
	m.inflight.scheduler = s
	return s
}

// Check validates what a configuration needs from the disks before it is applied: read
// probes need a filesystem that takes O_DIRECT and is not memory, and block sizes must
// suit the device's O_DIRECT alignment. Errors name the file, line and field.
func Check(cfg *config.Config, paths device.Paths) error {
	var errs []error
	for i, t := range cfg.Targets {
		fail := func(field, format string, args ...any) {
			errs = append(errs, &config.Error{File: cfg.File, Line: t.Line, Field: fmt.Sprintf("targets[%d].%s", i, field), Msg: fmt.Sprintf(format, args...)})
		}
		reads := t.Randread != nil || t.Seqread != nil
		if t.Kind == config.KindDirectory && (reads || t.Seqwrite != nil) {
			if err := probe.CheckDirectIO(t.Path); err != nil {
				fail("path", "%v", err)
				continue
			}
		}
		dev, err := paths.Resolve(t.Path)
		if err != nil {
			continue // device context is a bonus; the probes run without it
		}
		align := dev.LogicalBlockSize
		if align <= 0 {
			continue
		}
		if t.Randread != nil && t.Randread.BlockSize%align != 0 {
			fail("randread.block_size", "%d is not a multiple of %s's logical block size %d, which O_DIRECT needs", t.Randread.BlockSize, dev.Name, align)
		}
		for _, s := range []struct {
			name string
			c    *config.SequentialConfig
		}{{config.ProbeSeqread, t.Seqread}, {config.ProbeSeqwrite, t.Seqwrite}} {
			if s.c != nil && s.c.BlockSize%align != 0 {
				fail(s.name+".block_size", "%d is not a multiple of %s's logical block size %d, which O_DIRECT needs", s.c.BlockSize, dev.Name, align)
			}
		}
	}
	return errors.Join(errs...)
}

// Apply makes the running targets those of cfg. Targets whose configuration did not
// change keep running untouched (their counters and prepared files too); changed ones
// are restarted; removed ones are stopped and their series deleted.
func (s *Scheduler) Apply(cfg *config.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publish()
	want := map[string]config.Target{}
	for _, t := range cfg.Targets {
		want[t.Name] = t
	}
	for name, r := range s.runners {
		t, keep := want[name]
		if keep && sameTarget(r.target, t) {
			continue
		}
		s.stopRunner(r)
		delete(s.runners, name)
		if !keep {
			s.metrics.forget(name)
		}
	}
	for _, t := range cfg.Targets {
		if _, running := s.runners[t.Name]; running {
			continue
		}
		dev, err := s.paths.Resolve(t.Path)
		devOK := err == nil
		if err != nil {
			s.logger.Warn("no device context for target", "target", t.Name, "path", t.Path, "err", err)
		}
		s.metrics.targetInfo.DeletePartialMatch(map[string]string{"target": t.Name})
		s.metrics.targetInfo.WithLabelValues(t.Name, t.Path, string(t.Kind), dev.Name, dev.Model, dev.Serial, boolLabel(dev.Rotational)).Set(1)
		lockKey := "path:" + t.Path
		if devOK {
			lockKey = dev.Disk
		}
		lock, ok := s.locks[lockKey]
		if !ok {
			lock = make(chan struct{}, 1)
			s.locks[lockKey] = lock
			s.disks[lockKey] = newDiskActivity()
		}
		r := newRunner(t, dev, devOK, s.paths, lock, s.metrics, s.clock, s.logger)
		r.disk = s.disks[lockKey]
		s.runners[t.Name] = r
		r.start()
		s.logger.Info("probing target", "target", t.Name, "path", t.Path, "kind", t.Kind, "device", dev.Name, "probes", fmt.Sprint(t.Probes()))
	}
}

// stopRunner stops a runner without waiting for an I/O stuck in the kernel.
func (s *Scheduler) stopRunner(r *runner) {
	r.stop(time.After(100 * time.Millisecond))
}

// Stop ends every runner, waiting up to timeout in all for outstanding operations.
// It reports whether every I/O worker finished.
func (s *Scheduler) Stop(timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := time.After(timeout)
	all := true
	for _, r := range s.runners {
		r.cancel()
	}
	for name, r := range s.runners {
		if !r.stop(deadline) {
			all = false
		}
		delete(s.runners, name)
	}
	return all
}

func sameTarget(a, b config.Target) bool {
	a.Line, b.Line = 0, 0
	return reflect.DeepEqual(a, b)
}

func boolLabel(b bool) string { return strconv.Itoa(map[bool]int{false: 0, true: 1}[b]) }
