package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeRandread, probeKind{
		build: func(r *runner, c *config.ProbeConfig) (probe.Prober, error) {
			src, err := r.prep.open(r)
			if err != nil {
				return nil, err
			}
			return probe.NewRandread(src, c.Ops, int(c.BlockSize))
		},
		record: func(m *Metrics, target string, pr *probeRun) {
			read := m.read.WithLabelValues(target)
			pr.env.Observe = func(s probe.Sample) { read.Observe(s.Duration.Seconds()) }
		},
	})
}
