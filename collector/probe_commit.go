package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeCommit, probeKind{
		build: func(w *worker, c *config.ProbeConfig) (probe.Prober, error) {
			return probe.NewCommit(probe.CommitOptions{Dir: w.target.ProbeRoot(), Ops: c.Ops, Pages: c.Pages,
				FileSize: c.FileSize, MinFree: w.target.Limits.MinFree})
		},
		metrics: func(m *Metrics) recorder {
			commit := m.newLatency("commit_duration_seconds", "Time of each whole commit of the commit probe (its page writes, fdatasync, meta page write, fdatasync), as etcd's backend_commit times bbolt's commit.", CommitBuckets)
			return func(target string, pr *probeRun) {
				commit := commit.WithLabelValues(target)
				pr.env.Observe = func(s probe.Sample) { commit.Observe(s.Duration.Seconds()) }
			}
		},
	})
}
