package bench

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// ruleScaleEnv turns TestRuleScale on (make bench sets it): it needs GBs of memory and
// minutes of CPU, never part of make test.
const ruleScaleEnv = "DISKPROBE_BENCH_RULESCALE"

// Markers around the rule-scale section of BENCHMARKS.md, so that this test alone rewrites it.
const (
	ruleScaleBegin = "<!-- rule scale section: make bench, or TestRuleScale alone, rewrites it -->"
	ruleScaleEnd   = "<!-- end of rule scale section -->"
)

// TestRuleScale measures the evaluation time of every shipped rule group
// (alerts/diskprobe.rules.yml) on Prometheus 3 at fleet scale: synthetic targets serving
// exactly the series the real exporter serves for one target with the default probes,
// grouped as 3 members (instances) per target name so that the peer rules have groups.
// The figure is Prometheus's own prometheus_rule_group_last_duration_seconds.
//
// DISKPROBE_BENCH_RULESCALE_TARGETS: comma-separated target counts (default 1000,10000);
// DISKPROBE_BENCH_RULESCALE_WARMUP: samples before the first measured evaluation (default 6m);
// DISKPROBE_BENCH_RULESCALE_EVALS: measured evaluations per count (default 4).
// With DISKPROBE_BENCH_REPORT set, the section of that file is rewritten.
func TestRuleScale(t *testing.T) {
	if os.Getenv(ruleScaleEnv) != "1" {
		t.Skip("set " + ruleScaleEnv + "=1 to run (make bench): needs ~4 GB of memory at 10,000 targets and minutes of CPU")
	}
	testenv.RequireRoot(t)
	promBin := filepath.Join(framework.ToolDir(t, "prometheus"), "prometheus")
	counts := []int{1000, 10000}
	if v := os.Getenv("DISKPROBE_BENCH_RULESCALE_TARGETS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 3 {
				t.Fatalf("DISKPROBE_BENCH_RULESCALE_TARGETS=%q: counts of at least 3", v)
			}
			counts = append(counts, n)
		}
	}
	warmup := 6 * time.Minute
	if v := os.Getenv("DISKPROBE_BENCH_RULESCALE_WARMUP"); v != "" {
		var err error
		if warmup, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	evals := envInt(t, "DISKPROBE_BENCH_RULESCALE_EVALS", 4)

	tmpl := exporterTargetSeries(t)
	rs := &ruleScale{Date: time.Now(), Prometheus: prometheusVersionLine(promBin), SeriesPerTarget: tmpl.series(),
		Load: loadAvg(), Warmup: warmup, Scrape: 15 * time.Second, Eval: time.Minute}
	for _, n := range counts {
		t.Run(fmt.Sprintf("targets=%d", n), func(t *testing.T) {
			rs.Runs = append(rs.Runs, measureRules(t, promBin, tmpl, n, rs.Scrape, rs.Eval, warmup, evals))
		})
	}
	rs.LoadAfter = loadAvg()
	md := rs.markdown()
	t.Log("\n" + md)
	if out := os.Getenv(reportEnv); out != "" {
		doc, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(benchkit.SpliceSection(string(doc), ruleScaleBegin, ruleScaleEnd, md)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// targetTemplate is one target's series as the real exporter serves them.
type targetTemplate struct {
	name     string // the target name in the scrape
	families []*dto.MetricFamily
}

func (tt *targetTemplate) series() int {
	n := 0
	for _, f := range tt.families {
		for _, m := range f.Metric {
			if h := m.GetHistogram(); h != nil {
				n += 2 + len(finiteBuckets(h)) + 1
			} else {
				n++
			}
		}
	}
	return n
}

// exporterTargetSeries runs the real exporter with one target and the default probes on a
// loop filesystem and keeps the series that carry its target label.
func exporterTargetSeries(t *testing.T) *targetTemplate {
	_, dir := testenv.LoopExt4(t, 1<<30)
	// min_free only: the loop filesystem is smaller than the default reserve; the probes and
	// their series are the defaults.
	cfg := framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: scale\n    path: %s\n    limits: {min_free: 0}\n", dir))
	e := framework.StartExporter(t, cfg)
	fams := framework.WaitMetric(t, e, 90*time.Second, "a round of every default probe", func(f map[string]*dto.MetricFamily) bool {
		for _, name := range []string{"diskprobe_fdatasync_duration_seconds", "diskprobe_read_duration_seconds"} {
			if c, ok := framework.Value(f, name, map[string]string{"target": "scale"}); !ok || c == 0 {
				return false
			}
		}
		return true
	})
	tt := &targetTemplate{name: "scale"}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := fams[n]
		var kept []*dto.Metric
		for _, m := range f.Metric {
			if labelValue(m, "target") == "scale" {
				kept = append(kept, m)
			}
		}
		if len(kept) > 0 {
			tt.families = append(tt.families, &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: kept})
		}
	}
	if _, ok := fams["diskprobe_target_info"]; !ok {
		t.Fatal("the exporter serves no diskprobe_target_info")
	}
	return tt
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func finiteBuckets(h *dto.Histogram) []*dto.Bucket {
	var b []*dto.Bucket
	for _, x := range h.Bucket {
		if !math.IsInf(x.GetUpperBound(), 1) {
			b = append(b, x)
		}
	}
	return b
}

// fleet serves nodes × targets synthetic targets: /node/<i> is node i, a member of
// cluster i/3, serving targets t0000… with the template's series. Histograms grow by ~20
// operations per 15 s from a lognormal latency (median per target, one member in seven
// clusters 2.5x slower, 2 % of scrapes a 4x slower spell), so rates and quantiles move.
// Error and skip counters stay put and success timestamps are now: a mostly healthy
// fleet, with the few firing alerts a real one has, not thousands.
type fleet struct {
	tmpl    *targetTemplate
	targets int // per node
	start   time.Time
	nodes   []*fleetNode
}

type fleetNode struct {
	mu      sync.Mutex
	last    float64 // seconds since start at the last scrape
	rng     *rand.Rand
	state   [][]seriesState // [target][metric index]
	medians []float64       // per target
}

type seriesState struct {
	counts     []float64
	sum, count float64
	value      float64
}

func newFleet(tmpl *targetTemplate, nodes, perNode int) *fleet {
	fl := &fleet{tmpl: tmpl, targets: perNode, start: time.Now()}
	for i := range nodes {
		n := &fleetNode{rng: rand.New(rand.NewPCG(uint64(i), 7))}
		for k := range perNode {
			median := 0.0003 * math.Exp(float64((i/3*7+k)%11)/7) // 0.3-1.3 ms: a mostly healthy fleet
			if (i/3)%7 == 0 && i%3 == 0 {
				median *= 2.5
			}
			n.medians = append(n.medians, median)
			var st []seriesState
			for _, f := range tmpl.families {
				for _, m := range f.Metric {
					s := seriesState{}
					if h := m.GetHistogram(); h != nil {
						s.counts = make([]float64, len(finiteBuckets(h)))
					} else if m.Counter != nil {
						s.value = m.Counter.GetValue()
					} else if m.Gauge != nil {
						s.value = m.Gauge.GetValue() * (1 + 0.01*float64(k%7))
					} else if m.Untyped != nil {
						s.value = m.Untyped.GetValue()
					}
					st = append(st, s)
				}
			}
			n.state = append(n.state, st)
		}
		fl.nodes = append(fl.nodes, n)
	}
	return fl
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func lognormCDF(x, median, sigma float64) float64 {
	if x <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-math.Log(x/median)/(sigma*math.Sqrt2))
}

func (fl *fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/node/"))
	if err != nil || i < 0 || i >= len(fl.nodes) {
		http.NotFound(w, r)
		return
	}
	n := fl.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Since(fl.start).Seconds()
	dt := now - n.last
	n.last = now
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	bw := bufio.NewWriterSize(w, 64<<10)
	// bufio's error is sticky: a scraper gone away shows in Flush, and nothing is to be done then.
	defer func() { _ = bw.Flush() }()
	out := func(format string, args ...any) { _, _ = fmt.Fprintf(bw, format, args...) }
	const sigma = 0.6
	var lbl strings.Builder
	for k := range fl.targets {
		target := fmt.Sprintf("t%04d", k)
		slow := 1.0
		if n.rng.Float64() < 0.02 {
			slow = 4
		}
		j := 0
		for _, f := range fl.tmpl.families {
			for _, m := range f.Metric {
				s := &n.state[k][j]
				j++
				lbl.Reset()
				for _, l := range m.Label {
					v := l.GetValue()
					switch l.GetName() {
					case "target":
						v = target
					case "device":
						v = fmt.Sprintf("sd%d", k)
					case "model":
						v = []string{"SYNTH SSD A", "SYNTH SSD B", ""}[(i/3)%3]
					case "serial":
						v = fmt.Sprintf("SN%05d-%03d", i, k)
					}
					fmt.Fprintf(&lbl, `%s="%s",`, l.GetName(), labelEscaper.Replace(v))
				}
				labels := strings.TrimSuffix(lbl.String(), ",")
				name := f.GetName()
				switch {
				case m.Histogram != nil:
					ops := 20.0 / 15 * dt * (0.7 + 0.6*n.rng.Float64())
					med := n.medians[k] * slow
					for b, x := range finiteBuckets(m.Histogram) {
						s.counts[b] += ops * lognormCDF(x.GetUpperBound(), med, sigma)
						out("%s_bucket{%s,le=\"%s\"} %g\n", name, labels, strconv.FormatFloat(x.GetUpperBound(), 'g', -1, 64), math.Floor(s.counts[b]))
					}
					s.count += ops
					s.sum += ops * med * math.Exp(sigma*sigma/2)
					out("%s_bucket{%s,le=\"+Inf\"} %g\n", name, labels, math.Floor(s.count))
					out("%s_sum{%s} %g\n%s_count{%s} %g\n", name, labels, s.sum, name, labels, math.Floor(s.count))
				case m.Counter != nil:
					switch {
					case strings.Contains(name, "error") || strings.Contains(name, "skipped"):
						// A healthy fleet: errors and skips stay where the real scrape had them.
					case name == "diskprobe_probe_cpu_wait_seconds_total":
						s.value += dt * 0.0001 // a few % of the fsync probe's time: no starved hosts
					case strings.HasSuffix(name, "_seconds_total"):
						s.value += dt * 0.002 * (1 + float64(k%5))
					default:
						s.value += dt * 0.1 * (1 + float64(k%5))
					}
					out("%s{%s} %g\n", name, labels, s.value)
				case strings.HasSuffix(name, "_timestamp_seconds"):
					out("%s{%s} %g\n", name, labels, float64(time.Now().UnixMilli())/1000)
				default:
					out("%s{%s} %g\n", name, labels, s.value)
				}
			}
		}
	}
}

// ruleRun is one target count's measurement.
type ruleRun struct {
	Targets, Nodes, PerNode int
	HeadSeries              float64
	PeerGroups              int   // series of the peer median
	PeakRSS                 int64 // bytes, VmHWM of Prometheus
	Groups                  []string
	Evals                   []map[string]float64 // per measured evaluation: group → seconds
}

func measureRules(t *testing.T, promBin string, tmpl *targetTemplate, targets int, scrape, eval, warmup time.Duration, evals int) *ruleRun {
	perNode := 4
	if targets < 3*perNode {
		perNode = 1
	}
	nodes := (targets + perNode - 1) / perNode
	nodes = (nodes + 2) / 3 * 3 // whole groups of 3
	fl := newFleet(tmpl, nodes, perNode)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fl}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })

	var sc strings.Builder
	fmt.Fprintf(&sc, "  - job_name: diskprobe\n    static_configs:\n")
	for i := range nodes {
		fmt.Fprintf(&sc, "      - targets: [%q]\n        labels: {__metrics_path__: \"/node/%d\", instance: \"node%05d:9934\", cluster: \"c%04d\"}\n",
			ln.Addr().String(), i, i, i/3)
	}
	p := framework.StartPrometheus(t, framework.PrometheusOptions{
		Binary:        promBin,
		Rules:         []string{testenv.RepoPath("alerts", "diskprobe.rules.yml")},
		Interval:      scrape,
		EvalInterval:  eval,
		ScrapeConfigs: sc.String(),
	})
	run := &ruleRun{Targets: nodes * perNode, Nodes: nodes, PerNode: perNode}
	t.Logf("%d targets (%d nodes × %d), Prometheus pid %d; warming up %s", run.Targets, nodes, perNode, p.Pid(), warmup)
	time.Sleep(warmup)
	for e := 0; e < evals; e++ {
		time.Sleep(eval)
		m := promSelfMetrics(t, p)
		durs := map[string]float64{}
		for _, s := range m["prometheus_rule_group_last_duration_seconds"].GetMetric() {
			g := labelValue(s, "rule_group")
			durs[g[strings.LastIndex(g, ";")+1:]] = s.GetGauge().GetValue()
		}
		run.Evals = append(run.Evals, durs)
		if hs := m["prometheus_tsdb_head_series"].GetMetric(); len(hs) > 0 {
			run.HeadSeries = hs[0].GetGauge().GetValue()
		}
		t.Logf("evaluation %d: %v (head series %.0f)", e+1, durs, run.HeadSeries)
	}
	for g := range run.Evals[len(run.Evals)-1] {
		run.Groups = append(run.Groups, g)
	}
	sort.Strings(run.Groups)
	run.PeakRSS = vmHWM(p.Pid())
	// The peer rules had real work: one median per group of 3.
	run.PeerGroups, err = p.SeriesCount("peers:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m_median")
	if err != nil {
		t.Fatal(err)
	}
	if want := nodes / 3 * perNode; run.PeerGroups != want {
		t.Errorf("%d peer groups with a median; want %d (every target name on 3 nodes)", run.PeerGroups, want)
	}
	return run
}

func promSelfMetrics(t *testing.T, p *framework.Prometheus) map[string]*dto.MetricFamily {
	resp, err := http.Get("http://" + p.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

func prometheusVersionLine(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// ruleScale is the section of BENCHMARKS.md.
type ruleScale struct {
	Date                 time.Time
	Prometheus           string
	SeriesPerTarget      int
	Load, LoadAfter      string
	Warmup, Scrape, Eval time.Duration
	Runs                 []*ruleRun
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}

func (rs *ruleScale) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## The rules at fleet scale\n<a id=\"rule-scale\"></a>\n\n", ruleScaleBegin)
	w("Every group of `alerts/diskprobe.rules.yml` evaluated by %s, read from its own\n", rs.Prometheus)
	w("`prometheus_rule_group_last_duration_seconds`. Synthetic targets serve exactly the %d series the real\n", rs.SeriesPerTarget)
	w("exporter serves for one target with the default probes (names, labels, bucket edges from a scrape of\n")
	w("it), `diskprobe_target_info` included, with lognormal latencies that move; nodes of 4 targets, three\n")
	w("nodes per `cluster`, so every target name has a peer group of 3. Scrape every %s, evaluation every %s,\n", rs.Scrape, rs.Eval)
	w("%s of samples before the first measured evaluation: the 1h and 6h windows hold only that much, so\n", rs.Warmup)
	w("their rules cost less here than after hours. Load average %s at the start, %s at the end (2 CPUs,\n", rs.Load, rs.LoadAfter)
	w("shared). Goal: a full evaluation at 10,000 targets under 10 %% of the 1-minute interval (6 s).\n\n")
	w("Command (alone, rewriting this section): `%s=1 DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestRuleScale$' -count=1 -v -timeout 60m`, run at %s.\n\n",
		ruleScaleEnv, rs.Date.UTC().Format("2006-01-02 15:04 MST"))
	w("| targets | peer groups | head series | peak RSS | full evaluation, median (max) |")
	groups := map[string]bool{}
	for _, r := range rs.Runs {
		for _, g := range r.Groups {
			groups[g] = true
		}
	}
	var gs []string
	for g := range groups {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	for _, g := range gs {
		w(" %s |", g)
	}
	w("\n|---|---|---|---|---|%s\n", strings.Repeat("---|", len(gs)))
	for _, r := range rs.Runs {
		var totals []float64
		per := map[string][]float64{}
		for _, e := range r.Evals {
			sum := 0.0
			for g, d := range e {
				sum += d
				per[g] = append(per[g], d)
			}
			totals = append(totals, sum)
		}
		mx := 0.0
		for _, x := range totals {
			mx = max(mx, x)
		}
		w("| %d | %d | %.2f M | %.2f GiB | %.2f s (%.2f s) |", r.Targets, r.PeerGroups, r.HeadSeries/1e6, float64(r.PeakRSS)/(1<<30), medianOf(totals), mx)
		for _, g := range gs {
			w(" %.3f s |", medianOf(per[g]))
		}
		w("\n")
	}
	w("\nPer group: the median over %d evaluations.\n%s\n", len(rs.Runs[0].Evals), ruleScaleEnd)
	return b.String()
}
