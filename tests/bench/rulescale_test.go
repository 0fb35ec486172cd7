package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
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
	"github.com/prometheus/prometheus/model/labels"
	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// ruleScaleEnv turns TestRuleScale on (make bench sets it): it needs GBs of memory and
// minutes of CPU, never part of make test.
const ruleScaleEnv = "DISKPROBE_BENCH_RULESCALE"

// TestRuleScale measures what the rules cost a Prometheus 3 at fleet scale, in CPU seconds
// of rule evaluation per minute: synthetic targets serving the series the real exporter
// serves for one target with the default probes (names, labels, bucket edges from a scrape
// of it), four targets a node, 30 % of nodes in peer groups of three (`peer_group` and `cluster` labels), a
// smartctl_exporter per node. Every window a rule reads is full: the history each series
// needs (every selector's range, offset and lookback in the rule files, ruleFileWindows) is
// written as a TSDB block with the writer promtool's backfill uses, from the same functions
// of time that the live fleet serves afterwards; recorded series read over a window are
// backfilled from what a discovery run recorded. Then one Prometheus per rule file and one
// without rules run side by side on copies of that block, scraping the live fleet; the cost
// is the difference of their process CPU (/proc/<pid>/stat) over the measured minutes.
// Per group and per rule: Prometheus's evaluation wall times (rules API), and the CPU split
// in their proportion.
//
// DISKPROBE_BENCH_RULESCALE_TARGETS: comma-separated target counts (default 1000,10000);
// DISKPROBE_BENCH_RULESCALE_RULES: comma-separated rule files (default alerts/diskprobe.rules.yml);
// DISKPROBE_BENCH_RULESCALE_MEASURE: measured time (default 5m), after
// DISKPROBE_BENCH_RULESCALE_WARMUP (default 3m) of live scrapes on the backfilled history;
// DISKPROBE_BENCH_RULESCALE_CLUSTERED: share of nodes in peer groups (default 0.3);
// DISKPROBE_BENCH_RULESCALE_PPROF: a directory for a minute's CPU profile of every Prometheus,
// taken after the measured window (where the rules' CPU goes, by function).
// With DISKPROBE_BENCH_REPORT set, its section of that file is rewritten.
func TestRuleScale(t *testing.T) {
	if os.Getenv(ruleScaleEnv) != "1" {
		t.Skip("set " + ruleScaleEnv + "=1 to run (make bench): needs ~10 GB of memory at 10,000 targets and minutes of CPU")
	}
	testenv.RequireRoot(t)
	promBin := filepath.Join(framework.ToolDir(t, "prometheus"), "prometheus")
	counts := []int{1000, 10000}
	if v := os.Getenv("DISKPROBE_BENCH_RULESCALE_TARGETS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 12 {
				t.Fatalf("DISKPROBE_BENCH_RULESCALE_TARGETS=%q: counts of at least 12", v)
			}
			counts = append(counts, n)
		}
	}
	files := []string{testenv.RepoPath("alerts", "diskprobe.rules.yml")}
	if v := os.Getenv("DISKPROBE_BENCH_RULESCALE_RULES"); v != "" {
		files = strings.Split(v, ",")
	}
	dur := func(name string, def time.Duration) time.Duration {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		return def
	}
	clustered := 0.3
	if v := os.Getenv("DISKPROBE_BENCH_RULESCALE_CLUSTERED"); v != "" {
		var err error
		if clustered, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := exporterFamilies(t)
	rs := &benchkit.RuleScale{Date: time.Now(), Prometheus: prometheusVersionLine(promBin), Load: loadAvg(),
		Scrape: 15 * time.Second, Eval: time.Minute, Warmup: dur("DISKPROBE_BENCH_RULESCALE_WARMUP", 3*time.Minute),
		Measure: dur("DISKPROBE_BENCH_RULESCALE_MEASURE", 5*time.Minute), Clustered: clustered,
		Targets: os.Getenv("DISKPROBE_BENCH_RULESCALE_TARGETS")}
	for _, f := range files {
		rs.Files = append(rs.Files, displayPath(f))
	}
	// The section is rewritten after every count, so that a run stopped early keeps what it measured.
	write := func() {
		rs.LoadAfter = loadAvg()
		md := rs.Markdown()
		t.Log("\n" + md)
		if out := os.Getenv(reportEnv); out != "" {
			doc, err := os.ReadFile(out)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err := os.WriteFile(out, []byte(benchkit.SpliceSection(string(doc), benchkit.RuleScaleBegin, benchkit.RuleScaleEnd, md)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("targets=%d", n), func(t *testing.T) {
			rs.Runs = append(rs.Runs, measureRuleCost(t, promBin, tmpl, files, n, rs))
		})
		write()
	}
}

// displayPath is a rule file's path relative to the repository when it is in it.
func displayPath(f string) string {
	if rel, err := filepath.Rel(testenv.RepoPath(), f); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return f
}

// exporterFamilies runs the real exporter with one target and the default probes on a loop
// filesystem and returns what it serves after a round of every default probe.
func exporterFamilies(t *testing.T) []*dto.MetricFamily {
	_, dir := testenv.LoopExt4(t, 1<<30)
	// min_free only: the loop filesystem is smaller than the default reserve; the probes and
	// their series are the defaults.
	cfg := framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: scale\n    path: %s\n    limits: {min_free: 0}\n", dir))
	e := framework.StartExporter(t, cfg)
	fams := framework.WaitMetric(t, e, 90*time.Second, "a round of every default probe, and the device's context", func(f map[string]*dto.MetricFamily) bool {
		for _, name := range []string{"diskprobe_fdatasync_duration_seconds", "diskprobe_read_duration_seconds", "diskprobe_sequential_throughput_bytes_per_second"} {
			if c, ok := framework.Value(f, name, map[string]string{"target": "scale"}); !ok || c == 0 {
				return false
			}
		}
		// Set from the second probe unit on the disk on: a template taken before it lacked
		// them, and the fleet with it (the busy share's hour went unread).
		for _, name := range []string{"diskprobe_device_busy_ratio", "diskprobe_device_other_iops"} {
			if _, ok := framework.Value(f, name, map[string]string{"target": "scale"}); !ok {
				return false
			}
		}
		return true
	})
	if _, ok := fams["diskprobe_target_info"]; !ok {
		t.Fatal("the exporter serves no diskprobe_target_info")
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		if strings.HasPrefix(n, "diskprobe_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []*dto.MetricFamily
	for _, n := range names {
		out = append(out, fams[n])
	}
	return out
}

// promRun is one Prometheus of a measurement: a rule file's, or the baseline without rules.
type promRun struct {
	file string // "" for the baseline
	p    *framework.Prometheus
	cpu0 float64
	ran0 map[string]float64 // rule group → evaluations run (scheduled minus missed) at t0
	t0   time.Time
	// per-minute samples of the rules API
	groupWall map[string][]float64
	ruleWall  map[string][]float64 // "group/name" → seconds
	ruleGroup map[string]string
	ruleQuery map[string]string  // "group/name" → the rule's expression
	interval  map[string]float64 // group → its evaluation interval, seconds (rules API)
}

func measureRuleCost(t *testing.T, promBin string, tmpl []*dto.MetricFamily, files []string, targets int, rs *benchkit.RuleScale) *benchkit.RuleScaleRun {
	perNode := 4
	nodes := (targets + perNode - 1) / perNode
	nodes = (nodes + 2) / 3 * 3
	clusteredNodes := int(float64(nodes)*rs.Clustered) / 3 * 3
	fl := newRuleFleet(tmpl, nodes, perNode, clusteredNodes, time.Now().Add(-30*24*time.Hour))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fl}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })
	sc := fl.scrapeConfigs(ln.Addr().String())
	run := &benchkit.RuleScaleRun{Targets: nodes * perNode, Nodes: nodes, PeerGroups: clusteredNodes / 3 * perNode,
		TargetSeries: len(fl.target), SmartSeries: len(fl.smart)}
	t.Logf("%d targets (%d nodes × %d, %d nodes in groups of 3), %d series a target, %d smartctl series a disk",
		run.Targets, nodes, perNode, clusteredNodes, len(fl.target), len(fl.smart))

	windows, recordedNames, err := ruleFileWindows(files...)
	if err != nil {
		t.Fatal(err)
	}
	// Discovery: each rule file on the live fleet (no history) long enough for every group to
	// have run three times; the recorded series that a window reads are kept, to be backfilled.
	readOverTime := map[string]bool{}
	for _, w := range windows {
		if _, rec := recordedNames[w.Name]; rec && w.From > lookback {
			readOverTime[w.Name] = true
		}
	}
	var recorded []recordedSeries
	if len(readOverTime) > 0 {
		var mu sync.Mutex
		var wg sync.WaitGroup
		seen := map[string]bool{}
		for _, f := range files {
			p := framework.StartPrometheus(t, framework.PrometheusOptions{Binary: promBin, Rules: []string{everyGroupAtOnce(t, f)},
				Interval: rs.Scrape, EvalInterval: 30 * time.Second, ScrapeConfigs: sc})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer p.Stop()
				waitRecorded(t, p, readOverTime, 3, 6*time.Minute, 10*time.Minute)
				for name := range readOverTime {
					r, err := p.Query(name)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, s := range r.Result {
						ls := labels.FromMap(s.Metric)
						if seen[ls.String()] {
							continue
						}
						seen[ls.String()] = true
						v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
						if math.IsNaN(v) || math.IsInf(v, 0) {
							v = 0
						}
						recorded = append(recorded, recordedSeries{Labels: ls, Value: v, Every: recordedNames[name]})
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	blocks := t.TempDir()
	t0 := time.Now()
	st, err := fl.backfill(context.Background(), blocks, windows, recorded, t0, rs.Scrape, rs.Eval, rs.Warmup+rs.Measure)
	if err != nil {
		t.Fatal(err)
	}
	run.Backfill = benchkit.Backfill{Series: st.Series, Samples: st.Samples, Recorded: st.Recorded, Took: st.Took, History: t0.Sub(st.MinTime)}
	t.Logf("backfilled %d series (%d recorded), %d samples, from %s before, in %s", st.Series, st.Recorded, st.Samples, t0.Sub(st.MinTime).Round(time.Minute), st.Took.Round(time.Second))

	// Side by side: the baseline and every rule file, each on its own copy of the block.
	runs := []*promRun{{file: ""}}
	for _, f := range files {
		runs = append(runs, &promRun{file: f})
	}
	for _, r := range runs {
		data := filepath.Join(t.TempDir(), "data")
		if out, err := exec.Command("cp", "-al", blocks, data).CombinedOutput(); err != nil {
			t.Fatalf("cp -al: %v %s", err, out)
		}
		var rules []string
		if r.file != "" {
			rules = []string{r.file}
		}
		r.p = framework.StartPrometheus(t, framework.PrometheusOptions{Binary: promBin, Rules: rules, Interval: rs.Scrape,
			EvalInterval: rs.Eval, ScrapeConfigs: sc, DataDir: data, ReadyTimeout: 5 * time.Minute})
		r.groupWall, r.ruleWall, r.ruleGroup, r.ruleQuery, r.interval = map[string][]float64{}, map[string][]float64{}, map[string]string{}, map[string]string{}, map[string]float64{}
	}
	t.Logf("warming up %s", rs.Warmup)
	time.Sleep(rs.Warmup)
	for _, r := range runs {
		r.cpu0, r.t0, r.ran0 = pidCPU(t, r.p.Pid()), time.Now(), evaluationsRun(promSelfMetrics(t, r.p))
	}
	for elapsed := time.Duration(0); elapsed < rs.Measure; elapsed += rs.Eval {
		time.Sleep(rs.Eval)
		for _, r := range runs {
			if r.file != "" {
				sampleRules(t, r)
			}
		}
	}
	if dir := os.Getenv("DISKPROBE_BENCH_RULESCALE_PPROF"); dir != "" {
		for i, r := range runs {
			saveProfile(t, r.p, filepath.Join(dir, fmt.Sprintf("%d-targets-%d-%s.pprof", targets, i, strings.TrimSuffix(filepath.Base(r.file), ".yml"))))
		}
	}
	var baseCPU float64
	for _, r := range runs {
		cpu := (pidCPU(t, r.p.Pid()) - r.cpu0) / time.Since(r.t0).Minutes()
		m := promSelfMetrics(t, r.p)
		res := benchkit.RuleScaleFile{File: displayPath(r.file), CPUPerMinute: cpu, RSS: procStatus(r.p.Pid(), "VmRSS:"), PeakRSS: procStatus(r.p.Pid(), "VmHWM:")}
		if hs := m["prometheus_tsdb_head_series"].GetMetric(); len(hs) > 0 {
			res.HeadSeries = hs[0].GetGauge().GetValue()
		}
		for _, s := range m["prometheus_rule_group_iterations_missed_total"].GetMetric() {
			res.Missed += s.GetCounter().GetValue()
		}
		// The share of the scheduled evaluations that ran in the window (each group at its
		// own interval): under 1 when the machine cannot keep up.
		var done, scheduled float64
		for g, n := range evaluationsRun(m) {
			iv := r.interval[g[strings.LastIndex(g, ";")+1:]]
			if iv <= 0 {
				iv = rs.Eval.Seconds()
			}
			done += n - r.ran0[g]
			scheduled += time.Since(r.t0).Seconds() / iv
		}
		if scheduled > 0 {
			res.Rounds = min(1, done/scheduled)
		}
		if r.file == "" {
			baseCPU = cpu
			run.Baseline = res
			continue
		}
		perMinute := func(g string) float64 {
			if iv := r.interval[g]; iv > 0 {
				return 60 / iv
			}
			return time.Minute.Seconds() / rs.Eval.Seconds()
		}
		groupSamples := map[string]float64{}
		for k, xs := range r.ruleWall {
			g := r.ruleGroup[k]
			rc := benchkit.RuleCost{Name: k, Group: g, Wall: benchkit.Median(xs), PerMinute: perMinute(g)}
			rc.Samples = querySamples(t, r.p, r.ruleQuery[k]) * rc.PerMinute
			groupSamples[g] += rc.Samples
			res.Rules = append(res.Rules, rc)
		}
		for g, xs := range r.groupWall {
			res.Groups = append(res.Groups, benchkit.RuleCost{Name: g, Wall: benchkit.Median(xs), PerMinute: perMinute(g), Samples: groupSamples[g]})
		}
		run.Files = append(run.Files, &res)
	}
	for _, f := range run.Files {
		f.RuleCPU = f.CPUPerMinute - baseCPU
		if f.Rounds > 0 {
			f.CPUPerRound = f.RuleCPU / f.Rounds
		}
		f.Apportion()
		t.Logf("%s: %.2f CPU-s/min of rule evaluation (%.2f with rules, %.2f without), %.2f of the scheduled evaluations ran in %s (%.2f CPU-s a minute if all had), head series %.0f, RSS %d MiB",
			f.File, f.RuleCPU, f.CPUPerMinute, baseCPU, f.Rounds, rs.Measure, f.CPUPerRound, f.HeadSeries, f.RSS>>20)
	}

	// The history is there: the longest window over a raw series is (nearly) full.
	var longest ruleWindow
	for _, w := range windows {
		if _, rec := recordedNames[w.Name]; !rec && w.From-w.To > longest.From-longest.To {
			longest = w
		}
	}
	if longest.Name != "" && len(runs) > 1 {
		rng := longest.From - longest.To
		sel := (&labels.Matcher{Type: labels.MatchEqual, Name: "__name__", Value: longest.Name}).String()
		q := fmt.Sprintf("max(count_over_time({%s}[%s] offset %s))", sel, model.Duration(rng), model.Duration(longest.To))
		if longest.To == 0 {
			q = fmt.Sprintf("max(count_over_time({%s}[%s]))", sel, model.Duration(rng))
		}
		// On the Prometheus without rules: the others may be too busy to answer in time.
		v, err := runs[0].p.Value(q)
		want := rng.Seconds() / rs.Scrape.Seconds()
		run.LongestWindow = fmt.Sprintf("`%s`: %.0f samples of %.0f", q, v, want)
		switch {
		case err != nil:
			run.LongestWindow = fmt.Sprintf("`%s`: not answered (%v)", q, err)
			t.Logf("%s: %v", q, err)
		case v < 0.9*want:
			t.Errorf("%s = %v; want about %.0f: the backfill did not fill the longest window", q, v, want)
		}
	}
	for _, r := range runs {
		r.p.Stop()
	}
	return run
}

// everyGroupAtOnce is a copy of rule file f whose groups have no interval of their own, so
// that in the discovery run a group every 5 minutes evaluates as often as the others: its
// first evaluation may come before the fleet's first scrape and record nothing, and then
// nothing of it would be backfilled.
func everyGroupAtOnce(t *testing.T, f string) string {
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	for _, g := range doc.Groups {
		delete(g, "interval")
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "discovery-"+filepath.Base(f))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitRecorded waits at least atLeast (a 5-minute window full: before it a rate over one may
// still lack its second sample for the targets scraped last, and a recording rule then records
// a share of them) and until every rule group of p has evaluated n times, or every time it was
// scheduled to (a group with a long interval), not counting the iterations it missed (on a
// loaded machine at 10,000 targets evaluations are missed), and logs how many series of each
// name it recorded. Their number need not settle: some exist only while a condition holds.
func waitRecorded(t *testing.T, p *framework.Prometheus, names map[string]bool, n float64, atLeast, timeout time.Duration) {
	began := time.Now()
	deadline := began.Add(timeout)
	last := map[string]float64{}
	for time.Now().Before(deadline) {
		time.Sleep(30 * time.Second)
		m := promSelfMetrics(t, p)
		missed := map[string]float64{}
		for _, s := range m["prometheus_rule_group_iterations_missed_total"].GetMetric() {
			missed[ruleGroupLabel(s)] = s.GetCounter().GetValue()
		}
		its := m["prometheus_rule_group_iterations_total"].GetMetric()
		done := len(its) > 0
		for _, s := range its {
			// A group with a long interval (10 m) is done when every evaluation it had run.
			scheduled := s.GetCounter().GetValue()
			if scheduled-missed[ruleGroupLabel(s)] < min(n, scheduled) || scheduled == 0 {
				done = false
			}
		}
		for name := range names {
			r, err := p.Query("count(" + name + ")")
			c := 0.0 // no series: none recorded (yet)
			if len(r.Result) > 0 {
				c, _ = strconv.ParseFloat(fmt.Sprint(r.Result[0].Value[1]), 64)
			}
			if err != nil {
				done = false
			}
			last[name] = c
		}
		if done && time.Since(began) >= atLeast {
			t.Logf("recorded: %v", last)
			return
		}
	}
	t.Logf("rule groups did not run %v evaluations in %s; recorded so far: %v", n, timeout, last)
}

// evaluationsRun is, per rule group, the evaluations scheduled minus those missed.
func evaluationsRun(m map[string]*dto.MetricFamily) map[string]float64 {
	ran := map[string]float64{}
	for _, s := range m["prometheus_rule_group_iterations_total"].GetMetric() {
		ran[ruleGroupLabel(s)] += s.GetCounter().GetValue()
	}
	for _, s := range m["prometheus_rule_group_iterations_missed_total"].GetMetric() {
		ran[ruleGroupLabel(s)] -= s.GetCounter().GetValue()
	}
	return ran
}

func ruleGroupLabel(m *dto.Metric) string {
	for _, l := range m.Label {
		if l.GetName() == "rule_group" {
			return l.GetValue()
		}
	}
	return ""
}

// sampleRules keeps the last evaluation's wall time of every group and rule (rules API).
func sampleRules(t *testing.T, r *promRun) {
	var body struct {
		Groups []struct {
			Name           string  `json:"name"`
			EvaluationTime float64 `json:"evaluationTime"`
			Interval       float64 `json:"interval"`
			Rules          []struct {
				Name           string  `json:"name"`
				Query          string  `json:"query"`
				EvaluationTime float64 `json:"evaluationTime"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := r.p.API("/api/v1/rules", url.Values{}, &body); err != nil {
		t.Logf("rules API: %v", err)
		return
	}
	for _, g := range body.Groups {
		r.groupWall[g.Name] = append(r.groupWall[g.Name], g.EvaluationTime)
		r.interval[g.Name] = g.Interval
		for i, rl := range g.Rules {
			k := fmt.Sprintf("%s#%02d %s", g.Name, i, rl.Name)
			r.ruleGroup[k] = g.Name
			r.ruleQuery[k] = rl.Query
			r.ruleWall[k] = append(r.ruleWall[k], rl.EvaluationTime)
		}
	}
}

// saveProfile writes a minute of p's CPU profile (its /debug/pprof) to path: where the rules'
// CPU goes, by function (go tool pprof -top).
func saveProfile(t *testing.T, p *framework.Prometheus, path string) {
	client := http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Get("http://" + p.Addr + "/debug/pprof/profile?seconds=60")
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		t.Logf("profile: %v", err)
	}
}

// querySamples is the samples one evaluation of expr reads now: the query API's
// totalQueryableSamples (stats=all). 0, logged, when the query fails.
func querySamples(t *testing.T, p *framework.Prometheus, expr string) float64 {
	var body struct {
		Stats struct {
			Samples struct {
				TotalQueryableSamples float64 `json:"totalQueryableSamples"`
			} `json:"samples"`
		} `json:"stats"`
	}
	if err := p.APIWithin("/api/v1/query", url.Values{"query": {expr}, "stats": {"all"}}, 5*time.Minute, &body); err != nil {
		t.Logf("samples of %q: %v", expr, err)
		return 0
	}
	return body.Stats.Samples.TotalQueryableSamples
}

// pidCPU is user+system CPU seconds of a process (/proc/<pid>/stat, clock ticks of 1/100 s).
func pidCPU(t *testing.T, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the command: state is f[0], utime f[11], stime f[12].
	u, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (u + sy) / 100
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

// procStatus is a size field (kB) of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
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
