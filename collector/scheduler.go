// Package collector schedules the probes of every target under hard rate limits and
// turns their results into Prometheus metrics. It asks the disk nothing itself: what a
// target's path is, and whether it is still on its filesystem at each round, is the
// inspect package's (under a bounded wait, inspect.Inspector, or as a round's
// outstanding operation); device context is read from /proc/diskstats through device;
// the probes' I/O is the probe package's job.
package collector

import (
	"context"
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
	"github.com/diskprobe/diskprobe_exporter/ebsnvme"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Scheduler runs one runner per target and swaps them on reload. The name is the user's
// (what runs when, under which limits); the timers themselves are each runner's scheduleLoop.
type Scheduler struct {
	shared

	mu      sync.Mutex // Apply, Plan and Stop hold it, for runners and stopped
	runners map[string]*runner
	stopped bool // by Stop, for good: Apply starts nothing after it

	ebs *ebsVolumes // reads the EBS volumes' own statistics (ebs.go)

	// snapshot is the runners for scrapes, which must never wait on mu: Stop holds it
	// while it waits for I/O workers.
	snapshot atomic.Pointer[[]*runner]
}

// shared is what the runners of a Scheduler share. Nothing writes it after NewScheduler.
type shared struct {
	metrics   *Metrics
	paths     device.Paths
	clock     Clock
	logger    *slog.Logger
	inspector *inspect.Inspector
	diskFor   func(key string) *disk // the disk a target is on (see worker.diskKey)
}

func (s *Scheduler) running() []*runner {
	if p := s.snapshot.Load(); p != nil {
		return *p
	}
	return nil
}

// publishSnapshot refreshes the scrape snapshot; mu must be held.
func (s *Scheduler) publishSnapshot() {
	rs := make([]*runner, 0, len(s.runners))
	for _, r := range s.runners {
		rs = append(rs, r)
	}
	s.snapshot.Store(&rs)
}

// NewScheduler creates a scheduler with no targets; Apply gives it some.
func NewScheduler(m *Metrics, paths device.Paths, clock Clock, logger *slog.Logger) *Scheduler {
	ds := &disks{byKey: map[string]*disk{}}
	s := &Scheduler{runners: map[string]*runner{},
		shared: shared{metrics: m, paths: paths, clock: clock, logger: logger, inspector: inspect.NewInspector(paths), diskFor: ds.get}}
	m.inflight.scheduler = s
	s.ebs = newEBSVolumes(paths, s.ebsTargets, ebsnvme.Read, logger)
	m.ebs.volumes = s.ebs
	s.ebs.start()
	m.vantage.scheduler, m.vantage.procfs = s, paths.ProcFS
	checkHostPressure(paths.ProcFS, logger)
	if err := probe.CheckCPUWait(); err != nil {
		logger.Warn("diskprobe_probe_cpu_wait_seconds_total is not exported: this kernel does not report how long a thread waits for a CPU (schedstat run_delay), so host CPU starvation cannot be told apart from a slow disk", "err", err)
	}
	return s
}

// ErrStopped is Apply's answer after Stop: the exporter is shutting down.
var ErrStopped = errors.New("the scheduler is stopped: shutting down")

// reloadStopWait is how long a reload waits, in all, for the workers of the targets it
// restarts or removes; a worker stuck in the kernel is left to finish by itself.
const reloadStopWait = 100 * time.Millisecond

// Apply makes the running targets those of a plan. Targets whose configuration did not
// change keep running untouched (their counters and prepared files too); changed ones
// are restarted; removed ones are stopped and their series deleted. It makes no file
// system call: Plan has asked the paths. After Stop it starts nothing and returns
// ErrStopped.
func (s *Scheduler) Apply(p *Plan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	defer s.publishSnapshot()
	want := map[string]planned{}
	for _, pt := range p.targets {
		want[pt.parsed.Name] = pt
	}
	var ending []*runner
	for name, r := range s.runners {
		if pt, ok := want[name]; !ok || !pt.keep {
			ending = append(ending, r)
		}
	}
	left := stopAll(ending, reloadStopWait)
	// A restarted target whose worker is stuck in the kernel still has that operation
	// outstanding: its new runner reports its age until it returns (the new worker waits
	// for the disk lock the old one holds, and would otherwise show the target idle).
	stuck := map[string]*runner{}
	for _, r := range ending {
		if left[r] {
			stuck[r.name] = r
		} else if old := r.stuckPredecessor(); old != nil {
			stuck[r.name] = old
		}
		delete(s.runners, r.name)
		if _, ok := want[r.name]; !ok {
			s.metrics.forget(r.name)
		}
	}
	for _, pt := range p.targets {
		name := pt.parsed.Name
		if _, running := s.runners[name]; running {
			continue
		}
		s.metrics.targetInfo.DeletePartialMatch(map[string]string{"target": name})
		r := newRunner(&s.shared, p.file, pt, stuck[name])
		s.runners[name] = r
		r.start()
		if res := pt.res; res != nil {
			t := res.Target
			s.logger.Info("probing target", "target", name, "path", t.Path, "kind", t.Type, "device", res.Device.Name, "probes", fmt.Sprint(t.ProbeNames()))
		}
	}
	return nil
}

// Ready says why the exporter is not ready (/-/ready), nil when it is: a target's path
// has not answered since it was configured (a mount that hung before it was first
// asked), or a target has failed every round since it started for a reason that will not
// pass by itself (permission denied, a read-only filesystem: see brokenBy), or a target's
// last round refused something at its paths that is not the exporter's (refusedBy). A
// target that hangs or fails otherwise once it has worked leaves it ready: that is the
// disk's state, which the metrics report, not a configuration that cannot work.
func (s *Scheduler) Ready() error {
	for _, r := range s.running() {
		if !r.status.inspected.Load() {
			return fmt.Errorf("target %s: its path has not answered yet (a hung mount?); see the log", r.name)
		}
		if why := r.brokenBy(); why != "" {
			return fmt.Errorf("target %s has failed every round since it started, for a reason that will not pass by itself: %s", r.name, why)
		}
		if why := r.refusedBy(); why != "" {
			return fmt.Errorf("target %s refuses to probe: %s", r.name, why)
		}
	}
	return nil
}

// stopAll stops runners for good and waits for their workers until one deadline, timeout
// from now, that every wait shares: each is cancelled before any is waited for, so
// however many workers are stuck in the kernel the wait is timeout in all, never one per
// runner, and never forever. It returns the runners whose worker it left stuck.
func stopAll(rs []*runner, timeout time.Duration) (stuck map[*runner]bool) {
	for _, r := range rs {
		r.halt()
	}
	deadline, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stuck = map[*runner]bool{}
	for _, r := range rs {
		if !r.stop(deadline) {
			stuck[r] = true
		}
	}
	return stuck
}

// Stop ends every runner, waiting up to timeout in all for outstanding operations, and
// any later Apply starts nothing (ErrStopped). It reports whether every I/O worker
// finished.
func (s *Scheduler) Stop(timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.ebs.stop()
	rs := make([]*runner, 0, len(s.runners))
	for name, r := range s.runners {
		rs = append(rs, r)
		delete(s.runners, name)
	}
	return len(stopAll(rs, timeout)) == 0
}

// sameTarget is whether a reload leaves a target as it is: where it stands in the file
// is not part of it.
func sameTarget(a, b config.Target) bool {
	a.Line, b.Line = 0, 0
	a.Index, b.Index = 0, 0
	a.Lines, b.Lines = nil, nil
	return reflect.DeepEqual(a, b)
}

func boolLabel(b bool) string { return strconv.Itoa(map[bool]int{false: 0, true: 1}[b]) }
