package sharding

import (
	"fmt"
	"strings"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// Markers around the sharding section of BENCHMARKS.md.
const (
	SectionBegin = "<!-- sharding section: make bench, or TestShardingReport alone, rewrites it -->"
	SectionEnd   = "<!-- end of sharding section -->"
)

// leg is one way of evaluating the rules, compared with one Prometheus.
type leg struct {
	Name  string // the column's title
	About string // how it was run
	Rows  []row
	Cost  string
}

// report is the section.
type report struct {
	Command   string
	Date      time.Time
	Elapsed   time.Duration
	RuleFile  string
	Tools     []string // each tool's version line
	Legs      []*leg
	Scenarios int
}

func (rep *report) splice(doc string) string {
	return benchkit.SpliceSection(doc, SectionBegin, SectionEnd, rep.markdown())
}

func (rep *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## Beyond one Prometheus: shards, Thanos, VictoriaMetrics\n<a id=\"sharding\"></a>\n\n", SectionBegin)
	w("`tests/sharding` replays the alert replay's scenarios (the fast subset of [Alert quality, replayed](#alert-replay),\n")
	w("the same simulated exporters and seeds) through `%s` on what evaluates rules beyond one\n", rep.RuleFile)
	w("Prometheus, and compares each alert's first firing after the onset (in a healthy scenario: its false\n")
	w("firings) with one Prometheus's (the replay's own rule manager and engine). \"same\": within %s, the\n", tolerance)
	w("same false firings and the same members named; what differs is explained in\n")
	w("[docs/alerts.md](docs/alerts.md#beyond-one-prometheus-sharding-thanos-ruler-vmalert). Tools (scripts/tools.sh, built from their Go modules):\n")
	for _, t := range rep.Tools {
		w("%s;\n", t)
	}
	w("\nCommand: `%s`, run at %s, %s of wall-clock time.\n\n", rep.Command, rep.Date.UTC().Format("2006-01-02 15:04 MST"), rep.Elapsed.Round(time.Second))
	for _, l := range rep.Legs {
		same := 0
		for _, r := range l.Rows {
			if r.Same {
				same++
			}
		}
		w("### %s\n\n%s %s\n\n%d of %d alert rows the same.\n\n", l.Name, l.About, l.Cost, same, len(l.Rows))
		w("| scenario | alert | severity | one Prometheus | %s | difference |\n|---|---|---|---|---|---|\n", l.Name)
		for _, r := range l.Rows {
			w("| %s | %s | %s | %s | %s | %s |\n", r.Scenario, r.Alert, r.Severity, r.Ref, r.Got, r.diff())
		}
		w("\n")
	}
	w("%s\n", SectionEnd)
	return b.String()
}
