package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeSeqwrite, probeKind{
		build: func(w *worker, c *config.ProbeConfig) (probe.Prober, error) {
			return probe.NewSeqwrite(w.target.ProbeRoot(), c.Bytes, int(c.BlockSize), w.target.Limits.MinFree, w.fallbackAlign())
		},
		metrics: recordSequential("write"),
	})
}
