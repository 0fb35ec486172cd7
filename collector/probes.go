package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Every probe kind is built, budgeted and recorded here from its declaration
// (probe.Kind, in the kind's own file in probe/): nothing in this package names a kind.

// build makes the prober of a probe of kind k on the worker's target, from the narrow
// value the kind's constructor takes. A variable, so that tests can put probers of
// their own on every target a Scheduler runs.
var build = func(w *worker, k *probe.Kind, c *config.ProbeConfig) (probe.Prober, error) {
	site := probe.Site{Dir: w.target.ProbeRoot(), MinFree: w.target.Limits.MinFree, Align: w.fallbackAlign()}
	if k.ReadsSource {
		src, err := w.reads.open(w)
		if err != nil {
			return nil, err
		}
		site.Reads = src
	}
	return k.New(site, *c)
}

// fallbackAlign is the O_DIRECT alignment the probes start from: the device's logical
// block size, when it is known.
func (w *worker) fallbackAlign() int64 {
	if w.devOK {
		return w.dev.LogicalBlockSize
	}
	return 0
}

// largestBlock is the largest operation any probe of t makes: the bytes budget lets it
// through at once. On a directory, the read probes' rounds also fill the read probe file,
// in blocks of probe.FillBlock.
func largestBlock(t *config.Target) int {
	var n int64
	for name, c := range t.Probe {
		k := config.LookupProbe(name)
		n = max(n, k.LargestBlock(*c))
		if t.Type == config.TypeDirectory && k.ReadsSource {
			n = max(n, probe.FillBlock)
		}
	}
	return int(n)
}

// kindMetrics are the metrics of one probe kind: a latency vector per phase it observes
// (probe.Kind.Histograms), by phase.
type kindMetrics struct {
	byPhase []*LatencyVec // nil where the kind observes no such phase
}

// newKindMetrics makes the latency vectors of every kind, each added to m.all once:
// two kinds that name the same histogram share it.
func (m *Metrics) newKindMetrics() {
	vecs := map[string]*LatencyVec{}
	for _, k := range probe.Kinds() {
		var km kindMetrics
		for _, h := range k.Histograms {
			v := vecs[h.Name]
			if v == nil {
				v = NewLatencyVec(h.Name, h.Help, h.Buckets)
				vecs[h.Name] = v
				m.all = append(m.all, v)
			}
			for int(h.Phase) >= len(km.byPhase) {
				km.byPhase = append(km.byPhase, nil)
			}
			km.byPhase[h.Phase] = v
		}
		m.kinds[k.Name] = km
	}
}

// record sets, on a probe of kind k on target, how its samples and rounds are recorded:
// each sample into its phase's histogram, and, for a kind that has a throughput, each
// successful round into the sequential metrics under its direction.
func (m *Metrics) record(k *probe.Kind, target string, pr *probeRun) {
	var byPhase []*LatencyHistogram
	for phase, v := range m.kinds[k.Name].byPhase {
		if v != nil {
			for len(byPhase) <= phase {
				byPhase = append(byPhase, nil)
			}
			byPhase[phase] = v.WithLabelValues(target)
		}
	}
	if len(byPhase) > 0 {
		pr.env.Observe = func(s probe.Sample) {
			if int(s.Phase) < len(byPhase) && byPhase[s.Phase] != nil {
				byPhase[s.Phase].Observe(s.Duration.Seconds())
			}
		}
	}
	if k.Throughput != "" {
		pr.throughput = &throughput{
			bytes:    m.seqBytes.WithLabelValues(target, k.Throughput),
			duration: m.seqDuration.WithLabelValues(target, k.Throughput),
			last:     m.seqThroughput.WithLabelValues(target, k.Throughput),
		}
	}
}

// throughput is where a sequential probe's successful rounds add up: bytes over the time
// inside the I/O calls, by direction.
type throughput struct {
	bytes, duration prometheus.Counter
	last            prometheus.Gauge
}

func (t *throughput) add(res probe.Result) {
	if res.IO > 0 {
		t.bytes.Add(float64(res.Bytes))
		t.duration.Add(res.IO.Seconds())
		t.last.Set(float64(res.Bytes) / res.IO.Seconds())
	}
}
