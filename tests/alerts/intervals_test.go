package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// A group with an interval of its own (diskprobe.every5m, every 5 minutes) writes its series
// that often: between two evaluations they are up to one interval old, at the edge of
// Prometheus's 5-minute lookback or past it, and a rule in another group that reads one as an
// instant vector sees it vanish for a moment (a `for:` clock reset, a join that drops a disk).
// promtool's unit tests evaluate every group at every step and cannot show it. So another
// group reads such a series only through a range of at least twice its interval
// (last_over_time(x[10m])); the group itself reads it as it likes, in order.
func TestNoRuleReadsASlowerGroupsSeriesAsAnInstantVector(t *testing.T) {
	for _, path := range ruleFiles(t) {
		groups := loadGroupIntervals(t, path)
		slow := map[string]groupInterval{} // recorded name → the slower group recording it
		for _, g := range groups {
			if g.interval > 0 {
				for _, r := range g.rules {
					if r.Record != "" {
						slow[r.Record] = g
					}
				}
			}
		}
		if len(slow) == 0 {
			continue
		}
		for _, g := range groups {
			for _, r := range g.rules {
				for _, bad := range instantReadsOfSlowerGroups(t, g, r.Expr, slow) {
					t.Errorf("%s: group %s, rule %s%s reads %s", path, g.name, r.Record, r.Alert, bad)
				}
				// The annotations' `query` reads at the alert's evaluation, an instant query too.
				for key, text := range r.Annotations {
					for name, h := range slow {
						if strings.Contains(text, `"`+name+"{") && h.name != g.name {
							t.Errorf("%s: alert %s, annotation %s queries %s (every %s) without last_over_time", path, r.Alert, key, name, h.interval)
						}
					}
				}
			}
		}
	}
}

// The check itself, on rules written to break it and to keep it.
func TestTheSlowerGroupCheckCatchesAnInstantRead(t *testing.T) {
	hourly := groupInterval{name: "hourly", interval: 5 * time.Minute}
	fast := groupInterval{name: "fast"}
	slow := map[string]groupInterval{"target:x:avg1h": hourly}
	for _, c := range []struct {
		g    groupInterval
		expr string
		bad  bool
	}{
		{fast, `target:x:avg1h > 0.5`, true},
		{fast, `up and on (instance) target:x:avg1h offset 1d`, true},
		{fast, `max_over_time(target:x:avg1h[5m])`, true}, // one interval: still a gap
		{fast, `last_over_time(target:x:avg1h[10m]) > 0.5`, false},
		{hourly, `target:x:avg1h > 0.5`, false}, // its own group: evaluated in order
		{fast, `target:y:avg1h > 0.5`, false},
	} {
		got := instantReadsOfSlowerGroups(t, c.g, c.expr, slow)
		if (len(got) > 0) != c.bad {
			t.Errorf("%s in group %s: reported %v, want a report: %v", c.expr, c.g.name, got, c.bad)
		}
	}
}

type groupInterval struct {
	name     string
	interval time.Duration // 0: the global evaluation interval
	rules    []rule
}

func loadGroupIntervals(t *testing.T, path string) []groupInterval {
	t.Helper()
	var out []groupInterval
	for _, g := range loadRules(t, path).Groups {
		gi := groupInterval{name: g.Name, rules: g.Rules}
		if g.Interval != "" {
			d, err := model.ParseDuration(g.Interval)
			if err != nil {
				t.Fatalf("%s: group %s: interval %q: %v", path, g.Name, g.Interval, err)
			}
			gi.interval = time.Duration(d)
		}
		out = append(out, gi)
	}
	return out
}

// instantReadsOfSlowerGroups names every selector in expr, evaluated in group g, of a series
// recorded by another, slower group that is not read over a range of twice that group's interval.
func instantReadsOfSlowerGroups(t *testing.T, g groupInterval, expr string, slow map[string]groupInterval) []string {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var bad []string
	parser.Inspect(e, func(node parser.Node, path []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, name := range metricNames(vs) {
			h, ok := slow[name]
			if !ok || h.name == g.name {
				continue
			}
			if len(path) > 0 {
				if ms, ok := path[len(path)-1].(*parser.MatrixSelector); ok && ms.Range >= 2*h.interval {
					continue
				}
			}
			bad = append(bad, fmt.Sprintf("%s (recorded every %s by %s) without a range of %s or more", vs, h.interval, h.name, 2*h.interval))
		}
		return nil
	})
	return bad
}
