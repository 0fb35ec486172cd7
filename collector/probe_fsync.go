package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeFsync, probeKind{
		build: func(w *worker, c *config.ProbeConfig) (probe.Prober, error) {
			return probe.NewFsync(probe.FsyncOptions{Dir: w.target.ProbeRoot(), Ops: c.Ops, BlockSize: int(c.BlockSize),
				FileSize: c.FileSize, MinFree: w.target.Limits.MinFree})
		},
		metrics: func(m *Metrics) recorder {
			fdatasync := m.newLatency("fdatasync_duration_seconds", "Time of each fdatasync(2) of the fsync probe, the call etcd's wal_fsync and fio's sync percentiles time.", LatencyBuckets)
			// No rule reads the write call's distribution, only its mean (a write into the
			// page cache is microseconds; a slow one shows in the mean and, with native
			// histograms, in full): native buckets only, three series per target, not seventeen.
			write := m.newLatency("write_duration_seconds", "Time of each write(2) of the fsync probe, before its fdatasync (native buckets only).", nil)
			return func(target string, pr *probeRun) {
				write, sync := write.WithLabelValues(target), fdatasync.WithLabelValues(target)
				pr.env.Observe = func(s probe.Sample) {
					if s.Phase == probe.PhaseWrite {
						write.Observe(s.Duration.Seconds())
					} else {
						sync.Observe(s.Duration.Seconds())
					}
				}
			}
		},
	})
}
