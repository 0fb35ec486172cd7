package collector

import (
	"fmt"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// probeKind is the collector side of a probe kind (config.ProbeKinds holds its schema):
// how its prober is built, the metrics it records into and how. Each kind registers one
// from its own file, collector/probe_<name>.go.
type probeKind struct {
	build func(w *worker, c *config.ProbeConfig) (probe.Prober, error)
	// metrics makes, for a new Metrics, the kind's own metrics (m.newLatency) and says
	// how a probe of the kind records into them or into those kinds share (m.seq*).
	metrics func(m *Metrics) recorder
}

// recorder sets, on a probe of its kind on target, pr.env.Observe for its samples and,
// when set, pr.onSuccess for what its successful rounds add up to.
type recorder func(target string, pr *probeRun)

var probeKinds = map[string]probeKind{}

func registerProbe(name string, k probeKind) {
	if config.LookupProbe(name) == nil {
		panic(fmt.Sprintf("collector: probe kind %q is not in config.ProbeKinds", name))
	}
	probeKinds[name] = k
}

func (w *worker) fallbackAlign() int64 {
	if w.devOK {
		return w.dev.LogicalBlockSize
	}
	return 0
}
