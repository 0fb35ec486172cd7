package alertreplay

import (
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// Sampled is one series that a scenario's scrapes write, with every sample.
type Sampled struct {
	Labels labels.Labels
	T      []int64 // milliseconds since the epoch, on the scenario's clock (Start)
	V      []float64
}

// GroupLabel is the label that makes a simulated exporter a member of a group of peers (the
// rules' peer_group; `cluster` names a Kubernetes cluster, which is not a group).
const GroupLabel = "peer_group"

// Member names one of a scenario's exporters by its instance and group (GroupLabel) labels.
type Member struct{ Instance, Cluster string }

// Members are the scenario's exporters, the disk first.
func (s *Scenario) Members() []Member {
	var out []Member
	for _, m := range s.members() {
		out = append(out, Member{m.instance, m.cluster})
	}
	return out
}

// Series runs the scenario's simulated exporters and scrapes exactly as Replay does (the same
// seeds, a scrape every probing.Scrape from the start to the end of the span) and returns
// every series the scrapes write, with all their samples: the input for another system's
// storage (a backfill, an import).
func (s *Scenario) Series(probing Probing) []Sampled {
	var out []Sampled
	span := s.Span()
	var buf []float64
	for _, m := range s.members() {
		exp, ser := s.newMember(m, probing)
		first := len(out)
		for _, l := range ser.labels {
			out = append(out, Sampled{Labels: l})
		}
		for t := start; !t.After(start.Add(span)); t = t.Add(probing.Scrape) {
			exp.advance(t)
			buf = exp.values(t, buf)
			ms := t.UnixMilli()
			for i, v := range buf {
				if exp.absent(ser, i, t) {
					continue // the exporter's series appears at the first skip, a ceiling once recognised
				}
				o := &out[first+i]
				o.T = append(o.T, ms)
				o.V = append(o.V, v)
			}
		}
	}
	return slices.DeleteFunc(out, func(s Sampled) bool { return len(s.T) == 0 }) // a skip series never skipped, a ceiling never recognised
}

// EvalTimes are the replay's evaluation times: every evalEvery from Start to Start+Span, as Replay
// evaluates.
func (s *Scenario) EvalTimes(evalEvery time.Duration) []time.Time {
	var out []time.Time
	for ts := start; !ts.After(start.Add(s.Span())); ts = ts.Add(evalEvery) {
		out = append(out, ts)
	}
	return out
}
