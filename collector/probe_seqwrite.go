package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeSeqwrite, probeKind{
		build: func(r *runner, c *config.ProbeConfig) (probe.Prober, error) {
			return probe.NewSeqwrite(r.target.ProbeRoot(), c.Bytes, int(c.BlockSize), r.target.Limits.MinFree, r.fallbackAlign())
		},
		metrics: recordSequential("write"),
	})
}
