package collector

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// TestReloadThatChangesAStuckTargetKeepsReportingItStuck: a reload that changes a target
// whose I/O is stuck in the kernel restarts it, abandoning the stuck worker. The new
// runner waits for the disk lock the old worker holds; it used to report the target idle
// (in-flight 0), so DiskprobeProbeStuck resolved while the I/O was still stuck. The age
// goes on from the stuck operation's start, through a second reload too, and drops to 0
// once the operation returns, after which the new runner probes.
func TestReloadThatChangesAStuckTargetKeepsReportingItStuck(t *testing.T) {
	hold := make(chan struct{})
	saved := build
	build = func(*worker, *probe.Kind, *config.ProbeConfig) (probe.Prober, error) {
		return &observingProber{ops: 1, hold: hold}, nil
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(func() {
		release()
		build = saved
	})

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := NewScheduler(m, device.Paths{}, RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { s.Stop(time.Second) })
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgWith := func(interval time.Duration) *config.Config {
		return &config.Config{Targets: []config.Target{{Name: "stuck", Path: dir, Type: config.TypeDirectory,
			Limits: config.Limits{IOPS: 100, Bandwidth: 1 << 30, Timeout: time.Hour},
			Probe: map[string]*config.ProbeConfig{
				config.ProbeFsync: {Interval: interval, Ops: 1, BlockSize: 4096, FileSize: 1 << 20}}}}}
	}
	apply := func(cfg *config.Config) {
		t.Helper()
		p, err := s.Plan(cfg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	inflight := func() float64 {
		return testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) { m.inflight.Collect(ch) }))
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s (in-flight %.3fs)", what, inflight())
			}
		}
	}

	apply(cfgWith(100 * time.Millisecond))
	waitFor("the first operation in flight", func() bool { return inflight() > 0.2 })
	for i, interval := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond} {
		before := inflight()
		apply(cfgWith(interval)) // a changed target: restarted, its stuck worker abandoned
		time.Sleep(300 * time.Millisecond)
		if after := inflight(); after < before+0.2 {
			t.Fatalf("reload %d of a stuck target: in-flight %.3fs before, %.3fs 300ms later; want it still growing", i+1, before, after)
		}
	}
	release()
	waitFor("in-flight back to 0 once the stuck operation returned", func() bool { return inflight() == 0 })
	runs := func() float64 { return testutil.ToFloat64(m.runs.WithLabelValues("stuck", config.ProbeFsync)) }
	r0 := runs()
	waitFor("rounds of the new runner", func() bool { return runs() > r0 })
}
