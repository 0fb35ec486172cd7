package collector

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/ceiling"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// smallOp is the largest operation whose time counts as a request's latency for the
// ceiling (ceiling.Recogniser.Own): a 4 KiB read or a WAL write with its fdatasync, not a
// 1 MiB sequential read.
const smallOp = 64 << 10

// deviceCeiling is what a target's worker knows of its device's ceiling and of its
// volume's burst credit. The worker feeds it the device's counters at each unit, and
// what each round did; it publishes when a window closes.
type deviceCeiling struct {
	recogniser *ceiling.Recogniser
	credit     *ceiling.Credit // nil unless the volume block gives a burst bucket
	bucket     ceiling.Bucket
}

// newDeviceCeiling starts the recognition of a target's device afresh (a restarted
// target forgets what was recognised: its path, or its volume, may be another) and
// publishes what its volume block states.
func newDeviceCeiling(m *Metrics, t config.Target) deviceCeiling {
	for _, v := range []*prometheus.GaugeVec{m.ceilingIOPS, m.ceilingBytes, m.ceilingSince, m.atCeiling,
		m.volumeLimitIOPS, m.volumeLimitBytes, m.volumeInfo, m.burstBalance, m.burstEmpty} {
		v.DeletePartialMatch(prometheus.Labels{"target": t.Name})
	}
	c := deviceCeiling{recogniser: ceiling.New(ceiling.DefaultThresholds)}
	v := t.Volume
	if v == nil {
		return c
	}
	m.volumeInfo.WithLabelValues(t.Name, v.Type).Set(1)
	limit := func(tier string, iops, bytes float64) {
		if iops > 0 {
			m.volumeLimitIOPS.WithLabelValues(t.Name, tier).Set(iops)
		}
		if bytes > 0 {
			m.volumeLimitBytes.WithLabelValues(t.Name, tier).Set(bytes)
		}
	}
	limit("baseline", v.IOPS, v.Throughput)
	if b := v.Burst; b != nil {
		limit("burst", b.IOPS, b.Throughput)
		baseline := v.IOPS
		if b.Bytes {
			baseline = v.Throughput
		}
		c.bucket = ceiling.Bucket{Size: b.Bucket, Refill: b.Refill, Baseline: baseline, Bytes: b.Bytes}
		c.credit = ceiling.NewCredit(c.bucket)
		for _, series := range ceiling.AllSeries {
			if series.Bytes() == b.Bytes {
				burst := b.IOPS
				if b.Bytes {
					burst = b.Throughput
				}
				c.recogniser.Expect(series, baseline, burst)
			}
		}
	}
	return c
}

// own adds what a round did on the device.
func (c *deviceCeiling) own(res probe.Result) {
	small := res.Filling.File == "" && res.Ops > 0 && res.Bytes/int64(res.Ops) <= smallOp
	io := res.IO
	if res.CPUWaitKnown {
		io -= res.CPUWait // waiting for a CPU is the host's, not a wait for the device
	}
	c.recogniser.Own(res.Ops, res.Bytes, io, small)
}

// observeDevice takes the device's counters, read as a unit starts, and publishes what
// changed.
func (w *worker) observeDevice(now time.Time, s device.Stats) {
	c := &w.ceiling
	closed := c.recogniser.Observe(now, s)
	if c.credit != nil {
		c.credit.Observe(now, s)
	}
	if !closed && c.credit == nil {
		return
	}
	st := c.recogniser.State()
	r := w.r
	if closed && r.logger.Enabled(context.Background(), slog.LevelDebug) { // the arguments allocate
		rate, length, saturated := c.recogniser.Last()
		r.logger.Debug("device window", "device", w.dev.Name, "length", length, "read_iops", rate[ceiling.ReadIOPS], "write_iops", rate[ceiling.WriteIOPS],
			"read_bytes_per_second", rate[ceiling.ReadBytes], "write_bytes_per_second", rate[ceiling.WriteBytes], "saturated", saturated, "at_ceiling", st.AtCeiling)
	}
	if closed && c.credit != nil && c.bucket.AtBaseline(&st, ceiling.DefaultThresholds.Flat) {
		c.credit.Empty() // held at the baseline: that is what an empty bucket does
	}
	m := r.metrics
	r.unlessRetired(func() {
		if c.credit != nil {
			m.burstBalance.WithLabelValues(r.name).Set(c.credit.Ratio())
			m.burstEmpty.WithLabelValues(r.name).Set(c.credit.EmptyIn())
		}
		if !closed {
			return
		}
		for _, series := range ceiling.AllSeries {
			vec := m.ceilingIOPS
			if series.Bytes() {
				vec = m.ceilingBytes
			}
			if level := st.Ceiling[series]; level > 0 {
				vec.WithLabelValues(r.name, series.Direction()).Set(level)
			} else {
				vec.DeleteLabelValues(r.name, series.Direction())
			}
		}
		if st.Recognised() {
			m.ceilingSince.WithLabelValues(r.name).Set(float64(st.Since.UnixNano()) / 1e9)
		} else {
			m.ceilingSince.DeleteLabelValues(r.name)
		}
		m.atCeiling.WithLabelValues(r.name).Set(map[bool]float64{false: 0, true: 1}[st.AtCeiling])
	})
}
