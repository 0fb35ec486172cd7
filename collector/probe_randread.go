package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeRandread, probeKind{
		build: func(w *worker, c *config.ProbeConfig) (probe.Prober, error) {
			src, err := w.reads.open(w)
			if err != nil {
				return nil, err
			}
			return probe.NewRandread(src, c.Ops, int(c.BlockSize))
		},
		metrics: func(m *Metrics) recorder {
			read := m.newLatency("read_duration_seconds", "Time of each O_DIRECT pread(2) of the randread probe, queue depth 1 (fio psync clat).", LatencyBuckets)
			return func(target string, pr *probeRun) {
				read := read.WithLabelValues(target)
				pr.env.Observe = func(s probe.Sample) { read.Observe(s.Duration.Seconds()) }
			}
		},
	})
}
