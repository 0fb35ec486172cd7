package sharding

import (
	"fmt"
	"strings"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
	"github.com/prometheus/prometheus/model/labels"
)

// layout lays several scenarios side by side in one store: scenario i at Offset(i) after the
// replay's clock origin, its instance and peer_group labels prefixed with Prefix(i). Scenarios
// are a stride apart, the stride a day longer than the longest scenario, so that no window of
// one (6 h at most) reaches into another's data; the prefixes keep the rules' `offset 1d` and
// `offset 1w` baselines, which look back further, on the scenario's own series.
type layout struct {
	scenarios []*alertreplay.Scenario
	stride    time.Duration
}

func newLayout(scs []*alertreplay.Scenario) *layout {
	var longest time.Duration
	for _, sc := range scs {
		longest = max(longest, sc.Span())
	}
	return &layout{scenarios: scs, stride: (longest/(24*time.Hour) + 2) * 24 * time.Hour}
}

func (l *layout) Offset(i int) time.Duration { return time.Duration(i) * l.stride }
func (l *layout) Prefix(i int) string        { return fmt.Sprintf("s%02d-", i) }

// From and To bound every scenario's evaluations, on the shifted clock.
func (l *layout) From() time.Time { return alertreplay.Start() }
func (l *layout) To() time.Time {
	n := len(l.scenarios) - 1
	return alertreplay.Start().Add(l.Offset(n) + l.scenarios[n].Span())
}

// at maps a time on the shifted clock to its scenario and the scenario's own clock; ok is
// false outside every scenario's span.
func (l *layout) at(t time.Time) (i int, own time.Time, ok bool) {
	d := t.Sub(alertreplay.Start())
	if d < 0 {
		return 0, t, false
	}
	i = int(d / l.stride)
	if i >= len(l.scenarios) {
		return 0, t, false
	}
	own = t.Add(-l.Offset(i))
	return i, own, own.Sub(alertreplay.Start()) <= l.scenarios[i].Span()
}

// series is scenario i's series, shifted and prefixed, those of the members keep accepts.
func (l *layout) series(i int, probing alertreplay.Probing, keep func(m alertreplay.Member) bool) []alertreplay.Sampled {
	off := l.Offset(i).Milliseconds()
	var out []alertreplay.Sampled
	for _, s := range l.scenarios[i].Series(probing) {
		m := alertreplay.Member{Instance: s.Labels.Get("instance"), Cluster: s.Labels.Get(alertreplay.GroupLabel)}
		if keep != nil && !keep(m) {
			continue
		}
		b := labels.NewBuilder(s.Labels)
		b.Set("instance", l.Prefix(i)+m.Instance)
		if m.Cluster != "" {
			b.Set(alertreplay.GroupLabel, l.Prefix(i)+m.Cluster)
		}
		ts := make([]int64, len(s.T))
		for k, t := range s.T {
			ts[k] = t + off
		}
		vs := s.V
		// Series whose values are times (the last successful round, the last reload) move too:
		// the rules subtract them from time().
		if strings.HasSuffix(s.Labels.Get("__name__"), "_timestamp_seconds") {
			vs = make([]float64, len(s.V))
			for k, v := range s.V {
				if v != 0 {
					v += float64(off) / 1000
				}
				vs[k] = v
			}
		}
		out = append(out, alertreplay.Sampled{Labels: b.Labels(), T: ts, V: vs})
	}
	return out
}

// unprefix strips scenario i's prefix from a label value.
func (l *layout) unprefix(i int, v string) string { return strings.TrimPrefix(v, l.Prefix(i)) }
