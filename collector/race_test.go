package collector

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// raceSample is the one duration every observingProber reports: a scrape whose _sum is not
// exactly count × raceSample, or whose le="0.0025" bucket is not its count, saw a histogram
// half-way through an observation or a fold.
const raceSample = 2 * time.Millisecond

// observingProber touches what a real probe touches of the scheduler's shared state, as
// fast as its budget lets it and without a disk: the budget, the in-flight start and the
// histograms. With hold set, its first operation stays in flight until hold is closed,
// like an I/O stuck in the kernel.
type observingProber struct {
	ops  int
	hold <-chan struct{}
}

func (p *observingProber) Round(ctx context.Context, env *probe.Env) (probe.Result, error) {
	var res probe.Result
	for range p.ops {
		if err := env.Budget.Wait(ctx, 4096); err != nil {
			return res, err
		}
		env.Inflight.Do(func() {
			if p.hold != nil {
				<-p.hold
			}
		})
		if env.Observe != nil { // the sequential probes report a Result only
			env.Observe(probe.Sample{Phase: probe.PhaseWrite, Duration: raceSample})
			env.Observe(probe.Sample{Phase: probe.PhaseFdatasync, Duration: raceSample})
		}
		res.Ops++
		res.Bytes += 4096
		res.IO += raceSample
	}
	return res, nil
}

func (p *observingProber) Close() error { return nil }

// TestScrapesRaceWithRoundsReloadsAndStop runs every path that scrapes share with the
// probing side at once, through the scheduler as the daemon drives it: probers observing
// into LatencyVec's hot/cold halves as fast as they can, scrapes (gzip, text format, and
// Gather for the native buckets) reading them and the in-flight atomics through the
// scheduler's snapshot pointer, reloads that add, restart and remove targets and so swap
// the snapshot and delete series mid-scrape, a target stuck in flight, and Stop. None of
// this takes a lock on the scrape side, so `make test` runs it under -race first (making
// the snapshot a plain slice, for one, is reported there). Every scrape's histograms are
// checked for consistency too, though with one observer per histogram a torn fold is
// rare here: TestLatencyHistogramScrapesAreConsistentUnderObservation is the one for that.
func TestScrapesRaceWithRoundsReloadsAndStop(t *testing.T) {
	hold := make(chan struct{})
	saved := build
	build = func(r *worker, _ *probe.Kind, _ *config.ProbeConfig) (probe.Prober, error) {
		if r.target.Name == "stuck" {
			return &observingProber{ops: 1, hold: hold}, nil
		}
		return &observingProber{ops: 5}, nil
	}
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(func() {
		release() // let the abandoned worker of the stuck target finish
		build = saved
	})

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := NewScheduler(m, device.Paths{}, RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	limits := config.Limits{IOPS: 1e5, Bandwidth: 1 << 30, Timeout: 50 * time.Millisecond}
	target := func(name, path string, interval time.Duration, probes ...string) config.Target {
		tg := config.Target{Name: name, Path: path, Type: config.TypeDirectory, Limits: limits}
		tg.Probe = map[string]*config.ProbeConfig{}
		for _, p := range probes {
			switch p {
			case config.ProbeFsync, config.ProbeRandread:
				tg.Probe[p] = &config.ProbeConfig{Interval: interval, Ops: 5, BlockSize: 4096, FileSize: 1 << 20}
			case config.ProbeSeqread:
				tg.Probe[p] = &config.ProbeConfig{Interval: interval, Bytes: 1 << 20, BlockSize: 4096}
			}
		}
		return tg
	}
	// steady is on a real directory, so its rounds also take the disk's lock and read
	// /proc/diskstats for device context; the others are on paths that do not resolve, so
	// each has a lock of its own and they observe in parallel. stuck never finishes its first
	// operation, and is kept, restarted (abandoning its worker) and removed by the reloads.
	tmp := t.TempDir()
	steady := target("steady", tmp, 3*time.Millisecond, config.ProbeFsync, config.ProbeRandread)
	stuck := target("stuck", filepath.Join(tmp, "absent-stuck"), 3*time.Millisecond, config.ProbeFsync)
	configs := []*config.Config{
		{Targets: []config.Target{steady, stuck,
			target("churn", filepath.Join(tmp, "absent-churn"), 2*time.Millisecond, config.ProbeFsync, config.ProbeSeqread)}},
		{Targets: []config.Target{steady, stuck,
			target("churn", filepath.Join(tmp, "absent-churn"), 4*time.Millisecond, config.ProbeFsync, config.ProbeRandread),
			target("extra", filepath.Join(tmp, "absent-extra"), 2*time.Millisecond, config.ProbeRandread)}},
		{Targets: []config.Target{steady,
			target("stuck", stuck.Path, 5*time.Millisecond, config.ProbeFsync)}},
		{Targets: []config.Target{steady}},
	}
	apply := func(cfg *config.Config) {
		if err := s.Apply(planWithoutDisks(s, cfg)); err != nil {
			t.Fatal(err)
		}
	}
	apply(configs[0])

	handler := bestSpeedGzip(reg)
	var (
		stop        = make(chan struct{})
		wg          sync.WaitGroup
		scrapes     atomic.Int64
		sawInflight atomic.Bool
		failed      atomic.Bool
		steadyMax   atomic.Uint64
	)
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	// checkFamilies checks one scrape; last is the steady target's fdatasync count in the
	// scraper's previous one (each scraper's own: two scrapes in flight may end in any order).
	checkFamilies := func(fams map[string]*dto.MetricFamily, last *uint64) {
		for _, name := range []string{"diskprobe_fdatasync_duration_seconds", "diskprobe_read_duration_seconds"} {
			for _, mm := range fams[name].GetMetric() {
				h := mm.GetHistogram()
				n := h.GetSampleCount()
				if want := float64(n) * raceSample.Seconds(); math.Abs(h.GetSampleSum()-want) > 1e-9*max(want, 1) {
					fail("torn scrape of %s%v: sum %v for %d samples of %v", name, mm.GetLabel(), h.GetSampleSum(), n, raceSample)
				}
				for _, b := range h.GetBucket() {
					want := uint64(0)
					if b.GetUpperBound() >= raceSample.Seconds() {
						want = n
					}
					if b.GetCumulativeCount() != want {
						fail("torn scrape of %s%v: bucket le=%v holds %d of %d samples", name, mm.GetLabel(), b.GetUpperBound(), b.GetCumulativeCount(), n)
					}
				}
				if len(h.GetPositiveDelta()) > 0 { // Gather: the native buckets too
					var native, bucket int64
					for _, d := range h.GetPositiveDelta() {
						bucket += d
						native += bucket
					}
					if uint64(native)+h.GetZeroCount() != n {
						fail("torn scrape of %s%v: %d native samples, count %d", name, mm.GetLabel(), native, n)
					}
				}
				if labelValue(mm, "target") == "steady" && name == "diskprobe_fdatasync_duration_seconds" {
					if n < *last {
						fail("steady's fdatasync count went back from %d to %d", *last, n)
					}
					*last = n
					for cur := steadyMax.Load(); n > cur && !steadyMax.CompareAndSwap(cur, n); cur = steadyMax.Load() {
					}
				}
			}
		}
		for _, mm := range fams["diskprobe_probe_inflight_seconds"].GetMetric() {
			if labelValue(mm, "target") == "stuck" && mm.GetGauge().GetValue() > 0 {
				sawInflight.Store(true)
			}
		}
	}
	scrapeHTTP := func(last *uint64) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		if w.Code != 200 {
			fail("scrape answered %d: %s", w.Code, w.Body)
			return
		}
		zr, err := gzip.NewReader(w.Body)
		if err != nil {
			fail("scrape: %v", err)
			return
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(zr)
		if err != nil {
			fail("scrape: %v", err)
			return
		}
		checkFamilies(fams, last)
	}
	scrapeGather := func(last *uint64) {
		fams, err := reg.Gather()
		if err != nil {
			fail("gather: %v", err)
			return
		}
		byName := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		checkFamilies(byName, last)
	}
	for _, scrape := range []func(*uint64){scrapeHTTP, scrapeHTTP, scrapeGather} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				scrape(&last)
				scrapes.Add(1)
			}
		}()
	}

	reloads := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); reloads++ {
		time.Sleep(30 * time.Millisecond)
		apply(configs[reloads%len(configs)])
	}
	apply(configs[0])
	time.Sleep(100 * time.Millisecond) // stuck is past its 50 ms timeout
	// Whether Stop finds stuck's worker held depends on where the reloads left it: a
	// restarted target waits for its disk's lock, which its abandoned worker still holds.
	start := time.Now()
	s.Stop(500 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v with an operation stuck", d)
	}
	time.Sleep(20 * time.Millisecond) // scrapes after Stop read what it left
	close(stop)
	wg.Wait()

	if !sawInflight.Load() {
		t.Error("no scrape saw the stuck target's operation in flight")
	}
	if steadyMax.Load() == 0 {
		t.Error("no scrape saw an observation of the steady target")
	}
	t.Logf("%d scrapes, %d reloads, %d fdatasyncs observed on the steady target", scrapes.Load(), reloads, steadyMax.Load())
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// planWithoutDisks is Scheduler.Plan for targets that need no disk: each is taken as it is,
// without device context, so each has a disk lock of its own and none is asked anything.
func planWithoutDisks(s *Scheduler, cfg *config.Config) *Plan {
	running := map[string]config.Target{}
	for _, r := range s.running() {
		running[r.name] = r.parsed
	}
	p := &Plan{file: "test.yml", wait: time.Second}
	for _, tg := range cfg.Targets {
		old, ok := running[tg.Name]
		p.targets = append(p.targets, planned{parsed: tg, keep: ok && sameTarget(old, tg),
			res: &inspect.Result{Target: tg, DeviceErr: errors.New("no disk in this test")}})
	}
	return p
}
