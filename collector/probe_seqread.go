package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

func init() {
	registerProbe(config.ProbeSeqread, probeKind{
		build: func(w *worker, c *config.ProbeConfig) (probe.Prober, error) {
			src, err := w.reads.open(w)
			if err != nil {
				return nil, err
			}
			return probe.NewSeqread(src, c.Bytes, int(c.BlockSize))
		},
		metrics: recordSequential("read"),
	})
}

// recordSequential adds a sequential probe's successful rounds to the sequential
// metrics, which both directions share, under its direction.
func recordSequential(direction string) func(m *Metrics) recorder {
	return func(m *Metrics) recorder {
		return func(target string, pr *probeRun) {
			bytes, duration := m.seqBytes.WithLabelValues(target, direction), m.seqDuration.WithLabelValues(target, direction)
			throughput := m.seqThroughput.WithLabelValues(target, direction)
			pr.onSuccess = func(res probe.Result) {
				if res.IO > 0 {
					bytes.Add(float64(res.Bytes))
					duration.Add(res.IO.Seconds())
					throughput.Set(float64(res.Bytes) / res.IO.Seconds())
				}
			}
		}
	}
}
