package collector

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

type countingProber struct{ rounds atomic.Int32 }

func (p *countingProber) Round(context.Context, *probe.Env) (probe.Result, error) {
	p.rounds.Add(1)
	return probe.Result{}, nil
}

func (p *countingProber) Close() error { return nil }

// TestRoundsOfAVantageWithNoProcessAreSkippedNotRunFromTheExportersCgroup: a target whose
// vantage names a process that is not there runs none of its rounds (run from the
// exporter's own cgroup, they would measure another disk than the one they name): each
// is skipped as no_vantage, the vantage is down, and the log says so once.
func TestRoundsOfAVantageWithNoProcessAreSkippedNotRunFromTheExportersCgroup(t *testing.T) {
	clock := newFakeClock()
	m := NewMetrics(prometheus.NewRegistry())
	var log testenv.SyncBuffer
	tg := testTarget("as-etcd", time.Second)
	tg.Vantage = &config.Vantage{PIDFile: filepath.Join(t.TempDir(), "etcd.pid")}
	r := testRunner(tg, make(chan struct{}, 1), m, clock, slog.New(slog.NewTextHandler(&log, nil)))
	cp := &countingProber{}
	r.probes[0].build = func(*worker, *config.ProbeConfig) (probe.Prober, error) { return cp, nil }
	r.start()
	skips := func() float64 {
		return testutil.ToFloat64(m.skipped.WithLabelValues("as-etcd", "fsync", SkipNoVantage))
	}
	deadline := time.Now().Add(10 * time.Second)
	for skips() < 3 && time.Now().Before(deadline) {
		clock.Advance(t, time.Second, 10*time.Millisecond, 1)
	}
	stopWithin(r, time.Second)
	if skips() < 3 {
		t.Fatalf("%v rounds skipped as no_vantage", skips())
	}
	if n := cp.rounds.Load(); n != 0 {
		t.Errorf("%d rounds ran without the process's cgroup", n)
	}
	if s := r.vantage.state.Load(); s == nil || s.up {
		t.Errorf("vantage state %+v, want down", s)
	}
	if n := strings.Count(log.String(), "no vantage"); n != 1 {
		t.Errorf("%d log lines say there is no vantage, want 1:\n%s", n, log.String())
	}
}
