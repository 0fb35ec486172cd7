package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeFsync, probeKind{
		build: func(r *runner, c *config.ProbeConfig) (probe.Prober, error) {
			return probe.NewFsync(probe.FsyncOptions{Dir: r.target.ProbeRoot(), Ops: c.Ops, BlockSize: int(c.BlockSize),
				FileSize: c.FileSize, MinFree: r.target.Limits.MinFree})
		},
		record: func(m *Metrics, target string, pr *probeRun) {
			write, sync := m.write.WithLabelValues(target), m.fdatasync.WithLabelValues(target)
			pr.env.Observe = func(s probe.Sample) {
				if s.Phase == probe.PhaseWrite {
					write.Observe(s.Duration.Seconds())
				} else {
					sync.Observe(s.Duration.Seconds())
				}
			}
		},
	})
}
