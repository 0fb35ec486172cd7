package collector

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// heldScheduler is a scheduler whose fsync probers hold their first operation in flight
// until release is called, like I/O stuck in the kernel; release runs in cleanup too.
func heldScheduler(t *testing.T) (s *Scheduler, m *Metrics, release func()) {
	t.Helper()
	hold := make(chan struct{})
	saved := build
	build = func(*worker, *probe.Kind, *config.ProbeConfig) (probe.Prober, error) {
		return &observingProber{ops: 1, hold: hold}, nil
	}
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(func() {
		release()
		build = saved
	})
	m = NewMetrics(prometheus.NewRegistry())
	s = NewScheduler(m, device.Paths{}, RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return s, m, release
}

// fsyncTargets are n targets with a fast fsync probe on paths of their own (each its own
// disk lock), named prefix0…; no disk is touched.
func fsyncTargets(t *testing.T, prefix string, n int) *config.Config {
	cfg, dir := &config.Config{}, t.TempDir()
	for i := range n {
		cfg.Targets = append(cfg.Targets, config.Target{Name: fmt.Sprintf("%s%d", prefix, i), Path: fmt.Sprintf("%s/absent-%s%d", dir, prefix, i),
			Type: config.TypeDirectory, Limits: config.Limits{IOPS: 100, Bandwidth: 1 << 30, Timeout: time.Hour},
			Probe: map[string]*config.ProbeConfig{config.ProbeFsync: {Interval: 50 * time.Millisecond, Ops: 1, BlockSize: 4096, FileSize: 1 << 20}}})
	}
	return cfg
}

// waitAllStuck waits until every running target has its operation in flight.
func waitAllStuck(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%d operations in flight", n), func() bool {
		stuck := 0
		for _, r := range s.running() {
			if _, age := r.outstanding(time.Now()); age > 0 {
				stuck++
			}
		}
		return stuck == n
	})
}

// TestStopWithSeveralStuckWorkersEndsAtOneDeadline: Stop used to give every runner the
// same time.After channel, which delivers one value: the first stuck worker's wait took
// it and the second waited forever, holding the scheduler's lock, so SIGTERM never ended
// the process with two hung mounts. Eight stuck workers are abandoned at one deadline.
func TestStopWithSeveralStuckWorkersEndsAtOneDeadline(t *testing.T) {
	s, _, _ := heldScheduler(t)
	const n = 8
	if err := s.Apply(planWithoutDisks(s, fsyncTargets(t, "hung", n))); err != nil {
		t.Fatal(err)
	}
	waitAllStuck(t, s, n)
	done := make(chan bool, 1)
	go func() { done <- s.Stop(200 * time.Millisecond) }()
	select {
	case all := <-done:
		if all {
			t.Error("Stop reported every worker finished while 8 were stuck")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Stop(200ms) still waiting 10s later with %d workers stuck", n)
	}
}

// TestReloadOfSeveralStuckTargetsWaitsOnce: a reload that removes or restarts targets
// waits for their workers reloadStopWait in all, not once per stuck worker (16 stuck
// targets used to hold a reload, and the scheduler's lock, for 1.6 s).
func TestReloadOfSeveralStuckTargetsWaitsOnce(t *testing.T) {
	s, _, _ := heldScheduler(t)
	t.Cleanup(func() { s.Stop(time.Second) })
	const n = 16
	if err := s.Apply(planWithoutDisks(s, fsyncTargets(t, "hung", n))); err != nil {
		t.Fatal(err)
	}
	waitAllStuck(t, s, n)
	start := time.Now()
	if err := s.Apply(planWithoutDisks(s, &config.Config{})); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("a reload removing %d stuck targets took %s", n, took)
	if took >= n*reloadStopWait/2 {
		t.Errorf("a reload removing %d stuck targets took %s; want about one reloadStopWait (%s), not one per target", n, took, reloadStopWait)
	}
}

// TestApplyAfterStopStartsNothing: a reload under way when SIGTERM came (its paths still
// being asked) used to apply after Stop and start runners in a process on its way out.
func TestApplyAfterStopStartsNothing(t *testing.T) {
	s, _, _ := heldScheduler(t)
	if err := s.Apply(planWithoutDisks(s, fsyncTargets(t, "a", 1))); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	p := planWithoutDisks(s, fsyncTargets(t, "b", 2))
	s.Stop(time.Second)
	if err := s.Apply(p); !errors.Is(err, ErrStopped) {
		t.Errorf("Apply after Stop: %v; want ErrStopped", err)
	}
	s.mu.Lock()
	started := len(s.runners)
	s.mu.Unlock()
	if started != 0 {
		t.Errorf("%d runners started after Stop", started)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Errorf("%d goroutines after Apply following Stop, %d before it", g, before)
	}
}

// TestReplacedRunnerCannotPublishItsLateInspection: a runner replaced or removed by a
// reload, whose worker had asked its path and gets the answer only now, used to publish
// it: a diskprobe_target_info with the old path beside the new one, or the series of a
// removed target back after the reload deleted them. Once stopped, a runner publishes
// nothing: not its inspection, its device context, or a skipped round.
func TestReplacedRunnerCannotPublishItsLateInspection(t *testing.T) {
	s, m, release := heldScheduler(t)
	release() // rounds end: the stopped runners' workers are gone, not stuck
	t.Cleanup(func() { s.Stop(time.Second) })
	cfg := fsyncTargets(t, "t", 1)
	oldPath := cfg.Targets[0].Path
	if err := s.Apply(planWithoutDisks(s, cfg)); err != nil {
		t.Fatal(err)
	}
	old := s.running()[0]
	late := inspect.Result{Target: cfg.Targets[0], DeviceErr: errors.New("no disk in this test")}

	newPath := oldPath + "-moved"
	cfg.Targets[0].Path = newPath
	if err := s.Apply(planWithoutDisks(s, cfg)); err != nil {
		t.Fatal(err)
	}
	if old.worker.inspected(late) {
		t.Error("a runner replaced by a reload took its late inspection")
	}
	if n := testutil.CollectAndCount(m.targetInfo); n != 1 {
		t.Errorf("%d diskprobe_target_info series for one target after its replaced runner's path answered late; want 1", n)
	}
	if v := testutil.ToFloat64(m.targetInfo.WithLabelValues("t0", newPath, string(config.TypeDirectory), "", "", "", "0")); v != 1 {
		t.Errorf("diskprobe_target_info for the new path: %v; want 1", v)
	}

	current := s.running()[0]
	if err := s.Apply(planWithoutDisks(s, &config.Config{})); err != nil {
		t.Fatal(err)
	}
	current.worker.inspected(late)
	current.probes[0].skip(SkipPreparing)
	for name, c := range map[string]prometheus.Collector{"target_info": m.targetInfo, "probe_skipped_total": m.skipped} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%d diskprobe_%s series of a removed target, published by its stopped runner", n, name)
		}
	}
}
