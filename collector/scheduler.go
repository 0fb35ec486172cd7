// Package collector schedules the probes of every target under hard rate limits and
// turns their results into Prometheus metrics. It never does raw I/O itself: that is
// the probe package's job.
package collector

import (
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
)

// Scheduler runs one runner per target and swaps them on reload.
type Scheduler struct {
	metrics *Metrics
	paths   device.Paths
	clock   Clock
	logger  *slog.Logger

	mu       sync.Mutex
	runners  map[string]*runner
	resolver *Resolver

	// locksMu guards locks and disks, which workers look up when their path answers late.
	locksMu sync.Mutex
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
		runners: map[string]*runner{}, resolver: NewResolver(paths), locks: map[string]chan struct{}{}, disks: map[string]*diskActivity{}}
	m.inflight.scheduler = s
	return s
}

// Apply makes the running targets those of a plan. Targets whose configuration did not
// change keep running untouched (their counters and prepared files too); changed ones
// are restarted; removed ones are stopped and their series deleted. It makes no file
// system call: Plan has asked the paths.
func (s *Scheduler) Apply(p *Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.publish()
	want := map[string]planned{}
	for _, pt := range p.targets {
		want[pt.parsed.Name] = pt
	}
	// A restarted target whose worker is stuck in the kernel still has that operation
	// outstanding: its new runner reports its age until it returns (the new worker waits
	// for the disk lock the old one holds, and would otherwise show the target idle).
	stuck := map[string]*runner{}
	for name, r := range s.runners {
		pt, ok := want[name]
		if ok && pt.keep {
			continue
		}
		if !s.stopRunner(r) {
			stuck[name] = r
		} else if old := r.stuckPredecessor(); old != nil {
			stuck[name] = old
		}
		delete(s.runners, name)
		if !ok {
			s.metrics.forget(name)
		}
	}
	for _, pt := range p.targets {
		if _, running := s.runners[pt.parsed.Name]; running {
			continue
		}
		t := pt.parsed.AssumedDirectory()
		if pt.res != nil {
			t = pt.res.target
		}
		r := newRunner(t, device.Info{}, false, s.paths, nil, s.metrics, s.clock, s.logger)
		r.parsed, r.file, r.index, r.resolver, r.diskFor = pt.parsed, p.file, pt.index, s.resolver, s.diskFor
		r.predecessor = stuck[pt.parsed.Name]
		s.metrics.targetInfo.DeletePartialMatch(map[string]string{"target": pt.parsed.Name})
		if pt.res != nil {
			r.resolved(*pt.res)
		} else {
			r.isResolved.Store(false)
			r.lock, r.disk = s.diskFor("path:" + pt.parsed.Path)
		}
		s.runners[pt.parsed.Name] = r
		r.start()
		if pt.res != nil {
			s.logger.Info("probing target", "target", t.Name, "path", t.Path, "kind", t.Kind, "device", r.dev.Name, "probes", fmt.Sprint(t.Probes()))
		}
	}
}

// diskFor is the lock and activity record shared by the targets on one disk (or one
// path, when the device is unknown); they are kept across reloads.
func (s *Scheduler) diskFor(key string) (chan struct{}, *diskActivity) {
	s.locksMu.Lock()
	defer s.locksMu.Unlock()
	lock, ok := s.locks[key]
	if !ok {
		lock = make(chan struct{}, 1)
		s.locks[key] = lock
		s.disks[key] = newDiskActivity()
	}
	return lock, s.disks[key]
}

// Ready reports whether every target's path has answered since it was configured
// (/-/ready): a target on a mount that hung before it was first asked is not resolved.
func (s *Scheduler) Ready() bool {
	for _, r := range s.running() {
		if !r.isResolved.Load() {
			return false
		}
	}
	return true
}

// stopRunner stops a runner without waiting for an I/O stuck in the kernel.
// stopRunner stops a runner for a reload; false: its worker was left stuck in the kernel.
func (s *Scheduler) stopRunner(r *runner) bool {
	return r.stop(time.After(100 * time.Millisecond))
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
