package bench

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// lookback is Prometheus's default lookback delta: what an instant selector reads.
const lookback = 5 * time.Minute

// ruleWindow is what one selector of a rule reads at an evaluation at time T: the samples
// of the series its matchers select in (T-From, T-To].
type ruleWindow struct {
	Name     string // the metric name the selector names
	Matchers []*labels.Matcher
	From, To time.Duration
}

func (w ruleWindow) matches(ls labels.Labels) bool {
	for _, m := range w.Matchers {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// ruleFileWindows parses rule files and returns every selector's window (ranges, offsets
// and subqueries included) and the names the files record.
func ruleFileWindows(files ...string) (windows []ruleWindow, recorded map[string]time.Duration, err error) {
	recorded = map[string]time.Duration{}
	for _, f := range files {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation)
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("%s: %v", f, errs)
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					recorded[r.Record] = time.Duration(g.Interval)
				}
				expr, err := parser.ParseExpr(r.Expr)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %v", f, r.Expr, err)
				}
				parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
					vs, ok := n.(*parser.VectorSelector)
					if !ok {
						return nil
					}
					from, to := vs.OriginalOffset+lookback, vs.OriginalOffset
					if len(path) > 0 {
						if ms, ok := path[len(path)-1].(*parser.MatrixSelector); ok {
							from = vs.OriginalOffset + ms.Range
						}
					}
					for _, p := range path {
						if sq, ok := p.(*parser.SubqueryExpr); ok {
							from += sq.Range + sq.OriginalOffset
							to += sq.OriginalOffset
						}
					}
					windows = append(windows, ruleWindow{Name: vs.Name, Matchers: vs.LabelMatchers, From: from, To: to})
					return nil
				})
			}
		}
	}
	return windows, recorded, nil
}

// interval is a span of time [From, To] in milliseconds.
type interval struct{ From, To int64 }

// historyIntervals is when a series must have samples for the windows that read it to be
// full at every evaluation in [t0, t0+measure]: the union of the windows that match it and the
// last minLookback before t0, clipped to before t0 (the live scrapes fill what is after).
func historyIntervals(ls labels.Labels, windows []ruleWindow, t0 time.Time, measure, minLookback time.Duration) []interval {
	end := t0.UnixMilli()
	iv := []interval{{end - minLookback.Milliseconds(), end}}
	for _, w := range windows {
		if !w.matches(ls) {
			continue
		}
		from := end - w.From.Milliseconds()
		to := min(end, end-w.To.Milliseconds()+measure.Milliseconds())
		if to > from {
			iv = append(iv, interval{from, to})
		}
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i].From < iv[j].From })
	merged := iv[:1]
	for _, x := range iv[1:] {
		last := &merged[len(merged)-1]
		if x.From <= last.To {
			last.To = max(last.To, x.To)
			continue
		}
		merged = append(merged, x)
	}
	return merged
}

// windowsByName indexes windows by the metric name they select (every selector of the
// shipped rules names one).
func windowsByName(ws []ruleWindow) map[string][]ruleWindow {
	m := map[string][]ruleWindow{}
	for _, w := range ws {
		m[w.Name] = append(m[w.Name], w)
	}
	return m
}

// TestRuleWindowsOfTheShippedRules: the backfill of TestRuleScale writes what the rules read
// and no more; the longest windows it derives from the shipped file are the ones the file has.
func TestRuleWindowsOfTheShippedRules(t *testing.T) {
	ws, recorded, err := ruleFileWindows(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) == 0 {
		t.Error("no recording rules found")
	}
	// The longest window over a series no rule records is written in full.
	var longest ruleWindow
	for _, w := range ws {
		if _, rec := recorded[w.Name]; !rec && w.To == 0 && w.From > longest.From {
			longest = w
		}
	}
	if longest.From < time.Hour {
		t.Errorf("the longest window over a scraped series is %s (%s); want an hour at least", longest.From, longest.Name)
	}
	t0 := time.Unix(1_000_000, 0)
	b := labels.NewScratchBuilder(4)
	b.Add("__name__", longest.Name)
	for _, m := range longest.Matchers {
		if m.Type == labels.MatchEqual && m.Name != "__name__" {
			b.Add(m.Name, m.Value)
		}
	}
	b.Sort()
	ls := b.Labels()
	iv := historyIntervals(ls, ws, t0, 5*time.Minute, 10*time.Minute)
	if len(iv) != 1 || t0.UnixMilli()-iv[0].From < longest.From.Milliseconds() || iv[0].To != t0.UnixMilli() {
		t.Errorf("history of %s: %v; want the %s before %d", ls, iv, longest.From, t0.UnixMilli())
	}
	// A series nothing reads gets the lookback only.
	ls = labels.FromStrings("__name__", "nothing_reads_this")
	if iv := historyIntervals(ls, ws, t0, 5*time.Minute, 10*time.Minute); len(iv) != 1 || iv[0].From != t0.Add(-10*time.Minute).UnixMilli() {
		t.Errorf("history of %s: %v", ls, iv)
	}
	// Disjoint windows stay disjoint: an offset of a week is not a week of samples.
	ws = append(ws, ruleWindow{Name: "x", From: 7*24*time.Hour + lookback, To: 7 * 24 * time.Hour})
	ls = labels.FromStrings("__name__", "x")
	if iv := historyIntervals(ls, ws, t0, 5*time.Minute, 10*time.Minute); len(iv) != 2 || iv[0].To-iv[0].From != (10*time.Minute).Milliseconds() {
		t.Errorf("history of %s with an offset of 1w: %v", ls, iv)
	}
}
