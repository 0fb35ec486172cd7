package alertreplay

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// RunAll replays every scenario, workers at a time.
func RunAll(ctx context.Context, scenarios []*Scenario, ruleFiles []string, probing Probing, evalEvery time.Duration, workers int) ([]*Result, error) {
	results := make([]*Result, len(scenarios))
	errs := make([]error, len(scenarios))
	sem := make(chan struct{}, max(1, workers))
	var wg sync.WaitGroup
	for i, sc := range scenarios {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = Replay(ctx, sc, ruleFiles, probing, evalEvery)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// Workers is how many scenarios replay at once: one per CPU, at most 4.
func Workers() int { return min(runtime.NumCPU(), 4) }

// Report is a replay's outcome, for BENCHMARKS.md.
type Report struct {
	Command   string
	Date      time.Time
	Elapsed   time.Duration
	EvalEvery time.Duration
	Probing   Probing
	Results   []*Result
}

// GoalRow is one goal judged on one scenario.
type GoalRow struct {
	Goal     string
	Scenario string
	Measured string
	Met      bool
}

// Judge applies the goals to every scenario they concern.
func Judge(results []*Result) []GoalRow {
	var rows []GoalRow
	for _, g := range Goals {
		for _, r := range results {
			if g.Scenario(r.Scenario.Name) {
				m, ok := g.Judge(r)
				rows = append(rows, GoalRow{Goal: g.Text, Scenario: r.Scenario.Name, Measured: m, Met: ok})
			}
		}
	}
	return rows
}

// Markers around the replay's section of BENCHMARKS.md, so that the replay alone can
// rewrite it.
const (
	SectionBegin = "<!-- alert replay section: make bench, or TestReplayReport alone, rewrites it -->"
	SectionEnd   = "<!-- end of alert replay section -->"
)

// Splice replaces the replay's section of doc, or appends it when doc has none yet.
func (rep *Report) Splice(doc string) string {
	return benchkit.SpliceSection(doc, SectionBegin, SectionEnd, rep.Markdown())
}

// Markdown renders the section, markers included.
func (rep *Report) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## Alert quality, replayed\n<a id=\"alert-replay\"></a>\n\n", SectionBegin)
	w("`tests/internal/alertreplay` replays fdatasync latency distributions through a simulation of the exporter's\n")
	w("default fsync probe (%d syncs a round every %s ±%.0f %%, counted into the classic buckets of\n", rep.Probing.Ops, rep.Probing.Interval, 100*rep.Probing.Jitter)
	w("`collector.LatencyBuckets`), a %s scrape, and Prometheus's own rule manager and PromQL engine\n", rep.Probing.Scrape)
	w("(github.com/prometheus/prometheus, as promtool's rule unit tests use them) evaluating the shipped\n")
	w("`alerts/diskprobe.rules.yml` every %s over the whole simulated span. Distributions: recordings of the\n", rep.EvalEvery)
	w("probe on this machine and on throttled loop devices, published fio and etcd tables, and synthetic\n")
	w("healthy disks, each in `tests/internal/alertreplay/testdata/` with its source. \"Detected\" is the time from\n")
	w("the onset of the bad phase to the first evaluation at which the alert fires; a false firing is an\n")
	w("episode that began while the disk was healthy, scaled to 30 days of one disk's time.\n")
	w("Group scenarios run three exporters, the same target on three instances of one cluster (member-0 turns\n")
	w("bad); fleet scenarios run healthy groups side by side with \"The Tail at Store\"'s slow hours replayed\n")
	w("densely and counted per slow hour. The etcd mixin's `etcdHighFsyncDurations`, over the same histogram\n")
	w("(`testdata/etcd-mixin.rules.yml`, not shipped), rides along for the lead-time row.\n\n")
	w("Command: `%s`, run at %s, %s of wall-clock time for %d scenarios.\n\n", rep.Command, rep.Date.UTC().Format("2006-01-02 15:04 MST"), rep.Elapsed.Round(time.Second), len(rep.Results))
	if warn, peer, dd, ok := WarningsPerDiskDay(rep.Results); ok {
		w("Healthy fleets (issue 31's figure), %.0f disk-days' worth: %d peer warnings, **%.4f peer warnings per disk-day**\n", dd, peer, float64(peer)/dd)
		w("(goal ≤ 0.01), and %d warnings of any alert, **%.4f per disk-day** (0.24 before issue 31). Computed as the\n", warn, float64(warn)/dd)
		w("warning episodes that began in the fleet scenarios (all their disks are healthy throughout) over the\n")
		w("disk-days that hold as many slow hours at \"The Tail at Store\"'s rate: replayed slow hours / (0.6 %% × 24 h);\n")
		w("the slow hours are replayed densely (one in %d per member, staggered), the healthy hours between them too.\n", tailPeriod)
		w("The warnings left are DiskprobeFdatasyncP99AboveEtcdTarget's: a SATA SSD 3–4× slower for an hour misses\n")
		w("etcd's 10 ms p99 in that hour.\n\n")
	}
	w("| goal | scenario | measured | met |\n|---|---|---|---|\n")
	for _, row := range Judge(rep.Results) {
		met := "yes"
		if !row.Met {
			met = "**no**"
		}
		w("| %s | %s | %s | %s |\n", row.Goal, row.Scenario, row.Measured, met)
	}
	w("\nEvery alert that fired, per scenario (alerts that never fired in a scenario are not listed):\n\n")
	w("| scenario | simulated | alert | severity | detected after onset | episodes | false firings (per 30 days) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		if len(r.Firings) == 0 {
			w("| %s | %s | — | | | | 0 |\n", r.Scenario.Name, durationWords(r.Scenario.Span()))
			continue
		}
		for _, f := range r.Firings {
			falses := "0"
			if f.False > 0 {
				falses = fmt.Sprintf("%d (%.1f)", f.False, r.FalsePer30Days(f))
			}
			detected := minutes(f.Detected)
			if r.Scenario.Onset < 0 {
				detected = "(healthy)"
			}
			w("| %s | %s | %s | %s | %s | %d | %s |\n", r.Scenario.Name, durationWords(r.Scenario.Span()), f.Alert, f.Severity, detected, f.Episodes, falses)
		}
	}
	w("\n%s\n", SectionEnd)
	return b.String()
}
