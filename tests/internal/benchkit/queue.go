package benchkit

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Queue is the comparison of check's queue-depth jobs (probe.RunQueue, behind
// `check --profile=sweep` and `--profile=randrw`) with fio's libaio engine, and the
// sweep's time against the time it advertises.
type Queue struct {
	Date    time.Time
	Command string
	Backing string // what the file and the device live on
	Pinned  string // which CPU the tools and the device's workers ran on, and why
	Cases   []*QueueCase
	Sweeps  []*SweepTiming
}

// QueueCase is one job, run by both tools in alternation on the same file.
type QueueCase struct {
	Title      string
	FioCommand string
	Ours       string
	Mixed      bool // reads and writes: both sides' p50 are compared
	Diagnostic bool // shown, not a goal (e.g. run unpinned)
	Rounds     []QueueRound
}

// QueueRound is one run of each tool, ours first.
type QueueRound struct{ Ours, Fio QueueSide }

// QueueSide is what one run measured.
type QueueSide struct {
	IOPS, BytesPerSecond float64
	ReadP50, WriteP50    time.Duration
}

// SweepTiming is one run of `check --profile=sweep`.
type SweepTiming struct {
	Where      string
	Command    string
	Cells      int
	Advertised time.Duration // what it said before the first read
	CellsTime  time.Duration // the cells' wall time, as it reports it
	Wall       time.Duration // the command's, preparation of a directory's file included
}

// ratio is the median over rounds of ours/fio of f.
func (c *QueueCase) ratio(f func(QueueSide) float64) (ratio, ours, fio float64) {
	var r, o, x []float64
	for _, rd := range c.Rounds {
		a, b := f(rd.Ours), f(rd.Fio)
		o, x = append(o, a), append(x, b)
		if b > 0 {
			r = append(r, a/b)
		}
	}
	return Median(r), Median(o), Median(x)
}

const queueTolerance = 0.15

func (q *Queue) rows() []Row {
	var rows []Row
	for _, c := range q.Cases {
		if c.Diagnostic {
			continue
		}
		figures := []struct {
			name string
			f    func(QueueSide) float64
			fmt  func(float64) string
		}{
			{"IO/s", func(s QueueSide) float64 { return s.IOPS }, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
			{"MB/s", func(s QueueSide) float64 { return s.BytesPerSecond }, func(v float64) string { return fmt.Sprintf("%.1f", v/1e6) }},
			{"read p50", func(s QueueSide) float64 { return float64(s.ReadP50) }, Dur},
		}
		if c.Mixed {
			figures = append(figures, struct {
				name string
				f    func(QueueSide) float64
				fmt  func(float64) string
			}{"write p50", func(s QueueSide) float64 { return float64(s.WriteP50) }, Dur})
		}
		for _, fig := range figures {
			ratio, ours, fio := c.ratio(fig.f)
			rows = append(rows, Row{Figure: c.Title + ": " + fig.name,
				Value: fmt.Sprintf("%.2f× (%s vs fio %s)", ratio, fig.fmt(ours), fig.fmt(fio)),
				Goal:  "within ±15 %", Met: within(ratio, queueTolerance), Where: "queue"})
		}
	}
	for _, s := range q.Sweeps {
		rows = append(rows, Row{Figure: "sweep of " + s.Where + " against its advertised time",
			Value: fmt.Sprintf("%s for %d cells, advertised %s", s.CellsTime.Round(100*time.Millisecond), s.Cells, s.Advertised),
			Goal:  "within it", Met: s.CellsTime <= s.Advertised, Where: "queue"})
	}
	return rows
}

// Markers around the queue-depth section, so that TestQueueDepthAgreement alone can
// replace it.
const (
	queueBegin = "<!-- queue section: make bench, or TestQueueDepthAgreement alone, rewrites it -->"
	queueEnd   = "<!-- end of queue section -->"
)

// SpliceQueue replaces the queue-depth section of an existing BENCHMARKS.md.
func (q *Queue) SpliceQueue(doc string) (string, error) {
	var b strings.Builder
	q.markdown(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	return splice(doc, queueBegin, queueEnd, b.String())
}

// SpliceSection replaces what lies between begin and end (both kept) in doc by section,
// which starts with begin and ends with end, or appends section when doc has no such
// markers yet: how a test that measures one thing rewrites its own part of BENCHMARKS.md.
func SpliceSection(doc, begin, end, section string) string {
	if s, err := splice(doc, begin, end, section); err == nil {
		return s
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + strings.TrimPrefix(section, "\n")
}

// splice replaces what lies between begin and end (both kept) in doc by section, which
// starts with begin and ends with end.
func splice(doc, begin, end, section string) (string, error) {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %q … %q markers in the report: run make bench once", begin, end)
	}
	return doc[:i] + strings.TrimSuffix(strings.TrimPrefix(section, "\n"), "\n") + doc[j+len(end):], nil
}

func (q *Queue) markdown(w func(string, ...any)) {
	w("\n%s\n## Queue depth: check --profile=sweep and randrw against fio's libaio\n<a id=\"queue\"></a>\n\n", queueBegin)
	w("`probe.RunQueue`, the I/O of `check --profile=sweep` and `--profile=randrw`, against fio's\n")
	w("`ioengine=libaio direct=1 iodepth=N` on the same file, one run of each in alternation, %d rounds;\n", len(q.firstRounds()))
	w("each figure is the median over rounds of ours/fio, with each side's median beside it. Ours keeps N\n")
	w("I/Os in flight from one goroutine with Linux AIO (io_submit per I/O, io_getevents), as fio's libaio\n")
	w("engine does, each I/O timed from before its io_submit to after the io_getevents that reaps it; fio's\n")
	w("latency is `lat` (the same span, `--lat_percentiles=1`). Random offsets are uniform with repetition\n")
	w("on both sides (fio `--norandommap`). %s\n\n", q.Backing)
	if q.Pinned != "" {
		w("%s Cases marked unpinned are shown, not judged.\n\n", q.Pinned)
	}
	w("Command (alone, rewriting this section): `%s`, run at %s.\n\n", q.Command, q.Date.UTC().Format("2006-01-02 15:04 MST"))
	w("| goal | measured | met |\n|---|---|---|\n")
	for _, row := range q.rows() {
		w("| %s: %s | %s | %s |\n", row.Figure, row.Goal, row.Value, metWord(row.Met))
	}
	for _, c := range q.Cases {
		w("\n### %s\n\nfio: `%s`\n\nours: %s\n\n", c.Title, c.FioCommand, c.Ours)
		w("| round | ours IO/s | fio IO/s | ours read p50 | fio read p50 |")
		if c.Mixed {
			w(" ours write p50 | fio write p50 |")
		}
		w("\n|---|---|---|---|---|")
		if c.Mixed {
			w("---|---|")
		}
		w("\n")
		for i, rd := range c.Rounds {
			w("| %d | %.0f | %.0f | %s | %s |", i+1, rd.Ours.IOPS, rd.Fio.IOPS, Dur(float64(rd.Ours.ReadP50)), Dur(float64(rd.Fio.ReadP50)))
			if c.Mixed {
				w(" %s | %s |", Dur(float64(rd.Ours.WriteP50)), Dur(float64(rd.Fio.WriteP50)))
			}
			w("\n")
		}
	}
	if len(q.Sweeps) > 0 {
		w("\n### Sweep time\n\n| where | command | cells | advertised | cells took | command took (with the file's preparation) |\n|---|---|---|---|---|---|\n")
		for _, s := range q.Sweeps {
			w("| %s | `%s` | %d | %s | %s | %s |\n", s.Where, s.Command, s.Cells, s.Advertised, s.CellsTime.Round(100*time.Millisecond), s.Wall.Round(100*time.Millisecond))
		}
	}
	w("%s\n", queueEnd)
}

func (q *Queue) firstRounds() []QueueRound {
	if len(q.Cases) == 0 {
		return nil
	}
	return q.Cases[0].Rounds
}

// sectionBegin matches the begin marker of a section a test splices in on its own:
// "<!-- <name> section: … -->", ended by "<!-- end of <name> section -->".
var sectionBegin = regexp.MustCompile(`<!-- (.+?) section: [^\n]*?-->`)

// KeepSections is doc, a freshly generated report, with every section of old (the report it
// replaces) that doc does not have appended: the sections that tests other than the
// generator's write (rule scale, live alert, replay, e2e timing) survive a regeneration.
func KeepSections(old, doc string) string {
	for _, m := range sectionBegin.FindAllStringSubmatchIndex(old, -1) {
		begin := old[m[0]:m[1]]
		if strings.Contains(doc, begin) {
			continue
		}
		end := "<!-- end of " + old[m[2]:m[3]] + " section -->"
		j := strings.Index(old[m[1]:], end)
		if j < 0 {
			continue
		}
		doc = SpliceSection(doc, begin, end, old[m[0]:m[1]+j+len(end)])
	}
	return doc
}
