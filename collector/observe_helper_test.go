package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// productionObserver is the Env.Observe newRunner gives a probe of kind on target.
func productionObserver(m *Metrics, kind, target string) func(probe.Sample) {
	pr := &probeRun{}
	m.record(config.LookupProbe(kind), target, pr)
	return pr.env.Observe
}
