package benchkit

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Markers around the rule-cost section of BENCHMARKS.md (TestRuleScale).
const (
	RuleScaleBegin = "<!-- rule scale section: make bench, or TestRuleScale alone, rewrites it -->"
	RuleScaleEnd   = "<!-- end of rule scale section -->"
)

// RuleScaleGoal is issue 31's goal: CPU seconds of rule evaluation per minute at 10,000 targets.
const RuleScaleGoal = 6.0

// RuleScale is TestRuleScale's measurement: the rules' CPU cost on Prometheus 3 at fleet scale.
type RuleScale struct {
	Date            time.Time
	Prometheus      string
	Files           []string // rule files measured side by side
	Load, LoadAfter string
	Scrape, Eval    time.Duration
	Warmup, Measure time.Duration
	Clustered       float64 // share of nodes in peer groups of 3
	Targets         string  // DISKPROBE_BENCH_RULESCALE_TARGETS when set (the default is 1000,10000)
	Runs            []*RuleScaleRun
}

// RuleScaleRun is one target count.
type RuleScaleRun struct {
	Targets, Nodes, PeerGroups int
	TargetSeries, SmartSeries  int // series a target serves; smartctl series a disk
	Backfill                   Backfill
	Baseline                   RuleScaleFile // the Prometheus without rules
	Files                      []*RuleScaleFile
	LongestWindow              string // the check that the longest raw window was full
}

// Backfill is what was written before Prometheus started.
type Backfill struct {
	Series, Samples, Recorded int64
	Took, History             time.Duration
}

// RuleScaleFile is one Prometheus of a run.
type RuleScaleFile struct {
	File         string
	CPUPerMinute float64 // process CPU seconds a minute
	RuleCPU      float64 // minus the baseline's
	HeadSeries   float64
	RSS, PeakRSS int64
	Missed       float64 // rule group iterations missed
	Rounds       float64 // share of the scheduled evaluations that ran in the measured window
	CPUPerRound  float64 // RuleCPU / Rounds: the CPU a minute if every scheduled evaluation had run
	Groups       []RuleCost
	Rules        []RuleCost
}

// RuleCost is a group's or a rule's median evaluation wall time and its share of the CPU.
type RuleCost struct {
	Name, Group string
	Wall        float64 // seconds, median of the last evaluation sampled every minute
	PerMinute   float64 // evaluations a minute (a minute over the group's interval)
	CPU         float64 // CPU seconds a minute, RuleCPU split in proportion to Wall × PerMinute
	// Samples a minute: the samples one evaluation of the expression reads (the query API's
	// stats, totalQueryableSamples, asked after the measured window), times PerMinute. It does
	// not depend on the machine's load, as wall times do.
	Samples float64
}

// Apportion splits RuleCPU over the groups and rules in proportion to their wall time a
// minute (a 10-minute group's evaluation counts a tenth).
func (f *RuleScaleFile) Apportion() {
	var total float64
	for _, g := range f.Groups {
		total += g.Wall * g.PerMinute
	}
	if total == 0 {
		return
	}
	for i := range f.Groups {
		f.Groups[i].CPU = f.RuleCPU * f.Groups[i].Wall * f.Groups[i].PerMinute / total
	}
	for i := range f.Rules {
		f.Rules[i].CPU = f.RuleCPU * f.Rules[i].Wall * f.Rules[i].PerMinute / total
	}
	sort.Slice(f.Groups, func(i, j int) bool { return f.Groups[i].CPU > f.Groups[j].CPU })
	sort.Slice(f.Rules, func(i, j int) bool { return f.Rules[i].CPU > f.Rules[j].CPU })
}

// Samples is the samples the rules read a minute, all together.
func (f *RuleScaleFile) Samples() float64 {
	var n float64
	for _, r := range f.Rules {
		n += r.Samples
	}
	return n
}

// Markdown is the section, between its markers.
func (rs *RuleScale) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## The rules at fleet scale\n<a id=\"rule-scale\"></a>\n\n", RuleScaleBegin)
	w("What the rules cost %s, in CPU seconds of rule evaluation per minute: the process CPU\n", rs.Prometheus)
	w("(`/proc/<pid>/stat` user+system) of a Prometheus evaluating a rule file minus that of one without rules, side\n")
	w("by side on copies of the same TSDB, scraping the same live fleet, over %s after %s of live scrapes.\n", rs.Measure, rs.Warmup)
	w("Per group and per rule: the rules API's `evaluationTime` (wall time of the last evaluation, median of one\n")
	w("sample a minute), and that CPU split in proportion to it (times the evaluations a minute: a group every\n")
	w("10 minutes counts a tenth). Samples a minute: what one evaluation of each expression reads (the query\n")
	w("API's `stats=all`, `totalQueryableSamples`, asked once after the measured window) times its evaluations\n")
	w("a minute; unlike wall times, it does not depend on the machine's load.\n\n")
	w("The fleet: synthetic targets serving the series the real exporter serves for one target with the default\n")
	w("probes (names, labels, DESIGN.md's bucket edges from a scrape of it: histograms, context, CPU-wait,\n")
	w("`diskprobe_target_info`), four targets a node, %.0f %% of nodes in peer groups of three (`peer_group` and `cluster` labels;\n", rs.Clustered*100)
	w("the rest share target names without one, as the chart's default configuration does), and a smartctl_exporter per node\n")
	w("(15 series a disk, serials matching). Latencies are lognormal (median 0.3-1.3 ms, one member in seven groups\n")
	w("2.5x slower, every target 4x slower for 2 %% of every two hours). Scrape every %s, evaluation every %s.\n\n", rs.Scrape, rs.Eval)
	w("History: every selector of the rule files (range, offset, subquery, and the 5 m lookback) says which\n")
	w("series must have samples how far back; those samples, from the same functions of time the live fleet\n")
	w("serves (counters continue across the seam), are written as one TSDB block with the writer promtool's\n")
	w("backfill uses (`tsdb.NewBlockWriter`), so every window, the 1 d ones included, is full at every measured\n")
	w("evaluation. Recorded series that a rule reads over a window are backfilled too, from a discovery run of\n")
	w("the rules on the live fleet (their values held with a small wave). Nothing that no rule reads is written.\n\n")
	w("Rule files: %s. Load average %s at the start, %s at the end, on 2 CPUs: with other work\n", strings.Join(quoted(rs.Files), ", "), rs.Load, rs.LoadAfter)
	w("beside it, wall times are inflated; CPU seconds much less so.\n\n")
	targets := ""
	if rs.Targets != "" {
		targets = "DISKPROBE_BENCH_RULESCALE_TARGETS=" + rs.Targets + " "
	}
	w("Command (alone, rewriting this section): `%s=1 %sDISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestRuleScale$' -count=1 -v -timeout 90m` (root; DISKPROBE_BENCH_RULESCALE_RULES=a.yml,b.yml compares files), run at %s.\n\n",
		"DISKPROBE_BENCH_RULESCALE", targets, rs.Date.UTC().Format("2006-01-02 15:04 MST"))
	w("| targets | rule file | rule evaluation CPU-s/min | share of the scheduled evaluations run in %s | CPU-s/min if all had run | goal at 10,000 (≤ %.0f) | samples read a minute | process CPU-s/min (without rules) | head series (without rules) | RSS, peak (without rules) | iterations missed |\n|---|---|---|---|---|---|---|---|---|---|---|\n", rs.Measure, RuleScaleGoal)
	for _, r := range rs.Runs {
		for _, f := range r.Files {
			goal := "—"
			if r.Targets >= 10000 {
				goal = metWord(f.CPUPerRound <= RuleScaleGoal)
				if f.CPUPerRound > RuleScaleGoal {
					goal += fmt.Sprintf(" (%.1fx, %.1f CPU-s over)", f.CPUPerRound/RuleScaleGoal, f.CPUPerRound-RuleScaleGoal)
				}
			}
			w("| %d | `%s` | %.2f | %.2f | **%.2f** | %s | %.1f M | %.2f (%.2f) | %.0f (%.0f) | %s, %s (%s) | %.0f |\n", r.Targets, f.File, f.RuleCPU, f.Rounds, f.CPUPerRound, goal,
				f.Samples()/1e6, f.CPUPerMinute, r.Baseline.CPUPerMinute, f.HeadSeries, r.Baseline.HeadSeries,
				gib(f.RSS), gib(f.PeakRSS), gib(r.Baseline.PeakRSS), f.Missed)
		}
	}
	w("\nWhen a Prometheus cannot keep up (iterations missed: an evaluation took longer than its interval), the\n")
	w("CPU a minute is what it got, not what the rules ask; divided by the share of the scheduled evaluations\n")
	w("that ran (each group at its own interval) it is what they ask: the goal is judged on that. With few\n")
	w("evaluations in the window that share is coarse (an evaluation counts where it starts).\n")
	w("\n| targets | nodes | peer groups | series a target | backfilled series (recorded) | samples | history | backfill took | longest raw window |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs.Runs {
		bf := r.Backfill
		w("| %d | %d | %d | %d (+%d smartctl) | %d (%d) | %.1f M | %s | %s | %s |\n", r.Targets, r.Nodes, r.PeerGroups, r.TargetSeries, r.SmartSeries,
			bf.Series, bf.Recorded, float64(bf.Samples)/1e6, bf.History.Round(time.Minute), bf.Took.Round(time.Second), r.LongestWindow)
	}
	for _, r := range rs.Runs {
		for _, f := range r.Files {
			w("\n### %d targets, `%s`: per group\n\n| group | evaluations a minute | wall time of an evaluation | CPU-s/min (apportioned) | samples read a minute |\n|---|---|---|---|---|\n", r.Targets, f.File)
			for _, g := range f.Groups {
				w("| %s | %.2g | %.3f s | %.2f | %.2f M |\n", g.Name, g.PerMinute, g.Wall, g.CPU, g.Samples/1e6)
			}
			w("\nThe 12 most expensive rules:\n\n| rule | group | wall time | CPU-s/min (apportioned) | samples read a minute |\n|---|---|---|---|---|\n")
			for i, rl := range f.Rules {
				if i == 12 {
					break
				}
				name := rl.Name[strings.Index(rl.Name, " ")+1:]
				w("| `%s` | %s | %.3f s | %.2f | %.2f M |\n", name, rl.Group, rl.Wall, rl.CPU, rl.Samples/1e6)
			}
		}
	}
	w("%s\n", RuleScaleEnd)
	return b.String()
}

func quoted(xs []string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, "`"+x+"`")
	}
	return out
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
