package sharding

import (
	"crypto/md5"
	"encoding/binary"
	"slices"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
)

// hashmod is Prometheus's relabel action hashmod on one source label's value (the last 8
// bytes of its MD5, modulo n): the shard a group (its `peer_group`) lands on with relabel_configs
// `{source_labels: [peer_group], modulus: n, target_label: __tmp_shard, action: hashmod}`.
func hashmod(value string, n uint64) int {
	sum := md5.Sum([]byte(value))
	return int(binary.BigEndian.Uint64(sum[8:]) % n)
}

// byCluster is the sharding docs/alerts.md recommends: whole groups, by their peer_group label.
func byCluster(m alertreplay.Member) int { return hashmod(m.Cluster, 2) }

// fleetScenario is several groups at once, so that sharding by group has something to
// shard: 4 clusters of 3 (c0 on one shard, c1-c3 on the other, by hashmod), and the first
// member of c1 turning into a failing SSD (half its syncs at 12-40 ms) after 2 healthy hours.
func fleetScenario(lib alertreplay.Library) *alertreplay.Scenario {
	gc := alertreplay.LogUniform{Lo: 0.020, Hi: 0.060}
	sata := alertreplay.WithStalls(lib["synthetic-sata-ssd"], 0.005, gc)
	failing := &alertreplay.Mixture{Name: "half slow", Parts: []alertreplay.Distribution{lib["synthetic-sata-ssd"], alertreplay.LogUniform{Lo: 0.012, Hi: 0.040}},
		Weights: []float64{0.5, 0.5}}
	lead, bad := 2*time.Hour, 2*time.Hour
	return &alertreplay.Scenario{
		Name:   "sharded fleet: 4 groups of 3, one member of c1 turns into a failing SSD",
		Onset:  1,
		Phases: []alertreplay.Phase{{Name: "healthy", Duration: lead}, {Name: "failing", Duration: bad}},
		Groups: 4, GroupSize: 3, Seed: 4242,
		Fleet: func(g, m int) []alertreplay.Phase {
			second := alertreplay.Phase{Name: "healthy", Duration: bad, Latency: sata}
			if g == 1 && m == 0 {
				second = alertreplay.Phase{Name: "failing", Duration: bad, Latency: failing}
			}
			return []alertreplay.Phase{{Name: "healthy", Duration: lead, Latency: sata}, second}
		},
	}
}

// merge is what the shards' rule evaluations fired together, as one Alertmanager receiving
// from every shard sees it: each alert's earliest detection, its episodes and false firings
// summed, the members it named.
func merge(sc *alertreplay.Scenario, parts []*alertreplay.Result) *alertreplay.Result {
	out := &alertreplay.Result{Scenario: sc}
	byKey := map[[2]string]*alertreplay.Firing{}
	for _, p := range parts {
		out.Healthy += p.Healthy
		out.Evals = max(out.Evals, p.Evals)
		for _, f := range p.Firings {
			k := [2]string{f.Alert, f.Severity}
			m := byKey[k]
			if m == nil {
				m = &alertreplay.Firing{Alert: f.Alert, Severity: f.Severity, Detected: -1, DetectedBy: map[string]time.Duration{}}
				byKey[k] = m
				out.Firings = append(out.Firings, m)
			}
			if f.Detected >= 0 && (m.Detected < 0 || f.Detected < m.Detected) {
				m.Detected = f.Detected
			}
			m.False += f.False
			m.Episodes += f.Episodes
			m.Firing = max(m.Firing, f.Firing)
			for in, d := range f.DetectedBy {
				if e, ok := m.DetectedBy[in]; !ok || d < e {
					m.DetectedBy[in] = d
				}
			}
			for _, in := range f.Instances {
				if !slices.Contains(m.Instances, in) {
					m.Instances = append(m.Instances, in)
				}
			}
		}
	}
	for _, f := range out.Firings {
		slices.Sort(f.Instances)
	}
	slices.SortFunc(out.Firings, func(a, b *alertreplay.Firing) int {
		if a.Alert != b.Alert {
			if a.Alert < b.Alert {
				return -1
			}
			return 1
		}
		if a.Severity < b.Severity {
			return -1
		}
		if a.Severity > b.Severity {
			return 1
		}
		return 0
	})
	return out
}
