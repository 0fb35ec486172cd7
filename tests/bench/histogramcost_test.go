package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/internal/gzipresponse"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestHistogramScrapeCost decides whether collector.LatencyVec earns its keep: a real
// Prometheus scrapes, every second, two /metrics of the same 64 targets served by this
// process (the daemon's handler: text, gzip at BestSpeed), one with the exporter's
// LatencyVecs, one with client_golang HistogramVecs of the same classic and native
// buckets, fed the same observations, and reports its own scrape_duration_seconds of
// each, in the settings of promSettings and with Prometheus 3 asking for native
// histograms alone. It first checks that the two serve the same series and values, and
// measures the CPU of a scrape of each in process.
//
//	DISKPROBE_BENCH_HISTOGRAMCOST=1 go -C tests test ./bench -run '^TestHistogramScrapeCost$' -count=1 -v
func TestHistogramScrapeCost(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_HISTOGRAMCOST") == "" {
		t.Skip("set DISKPROBE_BENCH_HISTOGRAMCOST=1 to compare LatencyVec and HistogramVec as Prometheus scrapes them")
	}
	window := 150 * time.Second
	if w, err := time.ParseDuration(os.Getenv("DISKPROBE_BENCH_HISTOGRAMCOST_WINDOW")); err == nil {
		window = w
	}
	ours, theirs := newHistogramPair(t)
	stop := ours.observeLive(theirs)
	defer stop()
	sides := []*timedHandler{newTimedHandler("latencyvec", ours.reg), newTimedHandler("histogramvec", theirs.reg)}
	for _, accept := range []string{"text/plain", protobufAccept} {
		cpu := scrapeCPU(t, sides, accept)
		t.Logf("in process, Accept %s, gzip: CPU per scrape latencyvec %.2f ms, histogramvec %.2f ms (%.2f×)", accept, cpu[0]*1e3, cpu[1]*1e3, cpu[1]/cpu[0])
	}
	jobs := map[string]string{}
	for _, s := range sides {
		jobs[s.job] = serve(t, s)
	}

	settings, v3 := promSettings(t)
	// Native histograms alone: what a Prometheus 3 that asks for them and not for the
	// classic series costs.
	settings = append(settings, promSetting{server: v3, name: "scrape_native_histograms", job: []string{"scrape_native_histograms: true"}})
	for _, setting := range settings {
		// A subtest per setting, so that its Prometheus is stopped before the next starts.
		t.Run(setting.server.Name+" "+setting.name, func(t *testing.T) {
			for _, s := range sides {
				s.reset()
			}
			prom := framework.StartPrometheus(t, framework.PrometheusOptions{
				Binary: setting.server.Bin, Jobs: jobs, Flags: setting.flags, JobConfig: setting.job,
			})
			time.Sleep(window + 5*time.Second)
			rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
			q := func(expr, job string) float64 {
				v, err := prom.Value(fmt.Sprintf(expr, job))
				if err != nil {
					t.Fatalf("%s: %v", fmt.Sprintf(expr, job), err)
				}
				return v
			}
			var med [2]float64
			for i, s := range sides {
				med[i] = q(`quantile_over_time(0.5, scrape_duration_seconds{job=%q}`+rng+`)`, s.job)
				p99 := q(`quantile_over_time(0.99, scrape_duration_seconds{job=%q}`+rng+`)`, s.job)
				samples := q(`max_over_time(scrape_samples_scraped{job=%q}`+rng+`)`, s.job)
				scrapes := q(`count_over_time(scrape_duration_seconds{job=%q}`+rng+`)`, s.job)
				if up := q(`min_over_time(up{job=%q}`+rng+`)`, s.job); up != 1 {
					t.Errorf("%s %s: %s: a scrape failed", setting.server.Name, setting.name, s.job)
				}
				hMed, hP99, size, accept := s.figures()
				t.Logf("prometheus %s (%s) %-12s: scrape_duration median %.2f ms p99 %.2f ms (%.0f scrapes, %.0f samples); handler median %.2f ms p99 %.2f ms, %.1f KiB gzipped; %s",
					setting.server.Name, setting.name, s.job, med[i]*1e3, p99*1e3, scrapes, samples, hMed*1e3, hP99*1e3, size/1024, accept)
			}
			t.Logf("prometheus %s (%s): histogramvec/latencyvec median ratio %.2f×, difference %+.2f ms",
				setting.server.Name, setting.name, med[1]/med[0], (med[1]-med[0])*1e3)
		})
	}
}

// BenchmarkHistogramObserve is the probe's side: one observation into a target's
// histogram, LatencyVec against client_golang's HistogramVec of the same buckets, alone
// and from 8 goroutines on 8 targets.
//
//	go -C tests test ./bench -run '^$' -bench HistogramObserve -benchmem -count 6
func BenchmarkHistogramObserve(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	samples := make([]float64, 4096)
	for i := range samples {
		samples[i] = fdatasyncLatency(r)
	}
	theirs := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "bench_duration_seconds", Help: "h", Buckets: collector.LatencyBuckets,
		NativeHistogramBucketFactor: collector.NativeBucketFactor,
	}, []string{"target"})
	ours := collector.NewLatencyVec("bench_duration_seconds", "h", collector.LatencyBuckets)
	for _, c := range []struct {
		name string
		obs  func(target string) func(float64)
	}{
		{"latencyvec", func(t string) func(float64) { return ours.WithLabelValues(t).Observe }},
		{"histogramvec", func(t string) func(float64) { return theirs.WithLabelValues(t).Observe }},
	} {
		b.Run(c.name, func(b *testing.B) {
			observe := c.obs("t")
			i := 0
			for b.Loop() {
				observe(samples[i&4095])
				i++
			}
		})
		b.Run(c.name+"/parallel-8-targets", func(b *testing.B) {
			b.SetParallelism(4) // 8 goroutines on 2 cores
			var n sync.Mutex
			next := 0
			b.RunParallel(func(pb *testing.PB) {
				n.Lock()
				observe := c.obs(fmt.Sprintf("t%d", next))
				next++
				n.Unlock()
				i := 0
				for pb.Next() {
					observe(samples[i&4095])
					i++
				}
			})
		})
	}
}

// histogramSide is one registry with every metric the daemon registers, for 64 targets,
// and its three latency histograms (by metric name) to observe into.
type histogramSide struct {
	reg      *prometheus.Registry
	observes map[string]func(target string, v float64)
}

// histogramRegisterer registers what collector.NewMetrics registers, with the latency
// vectors replaced by client_golang HistogramVecs of the same name, help and classic
// buckets when clientGolang is set.
type histogramRegisterer struct {
	*prometheus.Registry
	clientGolang bool
	side         *histogramSide
	others       []prometheus.Collector
}

var descRE = regexp.MustCompile(`fqName: "([^"]*)", help: "((?:[^"\\]|\\.)*)",.*variableLabels: \{([^}]*)\}`)

// descOf is the name, help and variable labels of a single-metric collector.
func descOf(c prometheus.Collector) (name, help string, labels []string) {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	m := descRE.FindStringSubmatch((<-ch).String())
	help = strings.ReplaceAll(strings.ReplaceAll(m[2], `\"`, `"`), `\\`, `\`)
	if m[3] != "" {
		labels = strings.Split(m[3], ",")
	}
	return m[1], help, labels
}

func (r *histogramRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		lv, ok := c.(*collector.LatencyVec)
		if !ok {
			r.Registry.MustRegister(c)
			r.others = append(r.others, c)
			continue
		}
		name, help, _ := descOf(c)
		if !r.clientGolang {
			r.Registry.MustRegister(c)
			r.side.observes[name] = func(target string, v float64) { lv.WithLabelValues(target).Observe(v) }
			continue
		}
		hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: classicBuckets(lv),
			NativeHistogramBucketFactor: collector.NativeBucketFactor,
		}, []string{"target"})
		r.Registry.MustRegister(hv)
		r.side.observes[name] = func(target string, v float64) { hv.WithLabelValues(target).Observe(v) }
	}
}

// classicBuckets reads a LatencyVec's classic bucket edges from what it writes.
func classicBuckets(v *collector.LatencyVec) []float64 {
	v.WithLabelValues("edges")
	defer v.DeletePartialMatch(prometheus.Labels{"target": "edges"})
	ch := make(chan prometheus.Metric, 1)
	v.Collect(ch)
	m := &dto.Metric{}
	if err := (<-ch).Write(m); err != nil {
		panic(err)
	}
	var edges []float64
	for _, b := range m.GetHistogram().GetBucket() {
		edges = append(edges, b.GetUpperBound())
	}
	return edges
}

// newHistogramPair builds both sides, fills them with the same 64 targets' worth of
// series and observations, and checks that they expose the same thing.
func newHistogramPair(t *testing.T) (ours, theirs *histogramSide) {
	t.Helper()
	var regs [2]*histogramRegisterer
	for i := range regs {
		side := &histogramSide{reg: prometheus.NewRegistry(), observes: map[string]func(string, float64){}}
		regs[i] = &histogramRegisterer{Registry: side.reg, clientGolang: i == 1, side: side}
		collector.NewMetrics(regs[i])
	}
	ours, theirs = regs[0].side, regs[1].side
	for i := range regs {
		fillOthers(regs[i].others)
	}
	r := rand.New(rand.NewPCG(25, 5))
	for i := range 64 {
		target := fmt.Sprintf("t%02d", i)
		// A day of the 64-target configuration's probes (5 of each every 5 s).
		for range 86400 {
			ours.observeRound(theirs, target, r)
		}
	}
	// Every family, series, bucket (classic and native) and value, as the encoders get them.
	same := func(a, b *dto.MetricFamily) bool { return proto.Equal(a, b) }
	if !slices.EqualFunc(gatherUncreated(t, ours.reg), gatherUncreated(t, theirs.reg), same) {
		t.Fatal("LatencyVec and HistogramVec expose different things")
	}
	return ours, theirs
}

// observeRound observes one probe round's latencies of a target on both sides.
func (s *histogramSide) observeRound(other *histogramSide, target string, r *rand.Rand) {
	for name, v := range map[string]float64{
		"diskprobe_fdatasync_duration_seconds": fdatasyncLatency(r),
		"diskprobe_write_duration_seconds":     7e-6 * math.Exp(0.4*r.NormFloat64()),
		"diskprobe_read_duration_seconds":      90e-6 * math.Exp(0.3*r.NormFloat64()),
	} {
		s.observes[name](target, v)
		other.observes[name](target, v)
	}
}

// fdatasyncLatency is an SSD's fdatasync: log-normal about 150 µs, and one in a hundred
// ten to a thousand times slower (a flush behind other writes, a hiccup).
func fdatasyncLatency(r *rand.Rand) float64 {
	v := 150e-6 * math.Exp(0.35*r.NormFloat64())
	if r.IntN(100) == 0 {
		v *= math.Pow(10, 1+2*r.Float64())
	}
	return v
}

// observeLive keeps observing, as the 64-target daemon does (a round of each probe per
// target every 5 s), until the returned stop is called.
func (s *histogramSide) observeLive(other *histogramSide) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(7, 8))
		tick := time.NewTicker(5 * time.Second / 64)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for range 5 {
				s.observeRound(other, fmt.Sprintf("t%02d", i%64), r)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// fillOthers gives the daemon's other metrics the series a 64-target configuration of
// fsync and randread has.
func fillOthers(cs []prometheus.Collector) {
	for _, c := range cs {
		name, _, labels := descOf(c)
		for i := range 64 {
			values := []string{fmt.Sprintf("t%02d", i)}
			switch {
			case len(labels) == 0 || labels[0] != "target", strings.Contains(name, "sequential"), slices.Contains(labels, "reason"):
				// not per target, or not in this configuration, or not exposed until it happens
			case len(labels) == 1:
				setOrAdd(c, values, 3)
			case labels[1] == "probe":
				for _, probe := range []string{"fsync", "randread"} {
					setOrAdd(c, append(values, probe), 1000)
				}
			default: // target_info
				setOrAdd(c, append(values, "/var/lib/"+values[0], "directory", "vda", "QEMU HARDDISK", "", "1"), 1)
			}
		}
	}
}

func setOrAdd(c prometheus.Collector, values []string, v float64) {
	switch c := c.(type) {
	case *prometheus.CounterVec:
		c.WithLabelValues(values...).Add(v)
	case *prometheus.GaugeVec:
		c.WithLabelValues(values...).Set(v)
	}
}

// gatherUncreated gathers g without the created timestamps, which differ between two
// registries filled one after the other.
func gatherUncreated(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			if m.Histogram != nil {
				m.Histogram.CreatedTimestamp = nil
			}
			if m.Counter != nil {
				m.Counter.CreatedTimestamp = nil
			}
		}
	}
	return mfs
}

// timedHandler is the daemon's /metrics handler for one registry, timing each request
// from its start to its last byte and counting the bytes sent.
type timedHandler struct {
	job string
	h   http.Handler

	mu        sync.Mutex
	durations []time.Duration
	bytes     []int
	accept    string
}

func newTimedHandler(job string, reg *prometheus.Registry) *timedHandler {
	return &timedHandler{job: job, h: gzipresponse.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// As the daemon's, less the in-flight limit in front of the gzip writer, which one
		// scrape at a time never reaches.
		Timeout: 30 * time.Second, DisableCompression: true,
	}))}
}

type countingWriter struct {
	http.ResponseWriter
	n int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += n
	return n, err
}

func (s *timedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	cw := &countingWriter{ResponseWriter: w}
	s.h.ServeHTTP(cw, r)
	d := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durations = append(s.durations, d)
	s.bytes = append(s.bytes, cw.n)
	s.accept = r.Header.Get("Accept") + " → " + w.Header().Get("Content-Type")
}

func (s *timedHandler) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durations, s.bytes, s.accept = nil, nil, ""
}

// figures are the median and p99 handler time, the median body size and the last
// negotiation.
func (s *timedHandler) figures() (median, p99 float64, size float64, accept string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.durations) == 0 {
		return 0, 0, 0, ""
	}
	d := slices.Clone(s.durations)
	slices.Sort(d)
	b := slices.Clone(s.bytes)
	slices.Sort(b)
	return d[len(d)/2].Seconds(), d[len(d)*99/100].Seconds(), float64(b[len(b)/2]), s.accept
}

const protobufAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"

// scrapeCPU is the process's CPU time (user and system, GC included) per scrape of each
// side, in process: 20 rounds of 10 scrapes of each, alternating.
func scrapeCPU(t *testing.T, sides []*timedHandler, accept string) []float64 {
	t.Helper()
	cpu := make([]float64, len(sides))
	for range 20 {
		for i, s := range sides {
			before := processCPU(t)
			for range 10 {
				req := httptest.NewRequest("GET", "/metrics", nil)
				req.Header.Set("Accept", accept)
				req.Header.Set("Accept-Encoding", "gzip")
				w := httptest.NewRecorder()
				s.h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					t.Fatalf("%s: %d", s.job, w.Code)
				}
			}
			cpu[i] += (processCPU(t) - before).Seconds() / 200
		}
	}
	return cpu
}

func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serve serves h on a loopback port until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
