package collector

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/diskprobe/diskprobe_exporter/config"
)

const namespace = "diskprobe"

// LatencyBuckets are the classic bucket edges of the fdatasync and read histograms (the
// commit histogram has CommitBuckets): the edges a rule, a panel or a verdict decides on,
// each exact rather than interpolated:
// etcd's 10 ms (wal_fsync p99) and 25 ms (backend_commit p99) targets, the etcd-mixin's
// 0.5 s and 1 s alerts, 100 ms (etcd's default heartbeat), 2.5 ms and 5 ms on the way to
// 10 ms (the suspect-hardware alert's floors), and 100 µs and 1 ms, which tell NVMe from
// SATA from spinning disks. etcd's own buckets start at 1 ms and cannot see an SSD.
// Every edge costs a series per target and per histogram, and a Prometheus with 64 targets
// to scrape spends more on those series than on anything else (BENCHMARKS.md); the native
// buckets (factor 1.1) carry the full resolution to a Prometheus that ingests them.
var LatencyBuckets = []float64{100e-6, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1}

// CommitBuckets are the commit histogram's: LatencyBuckets and 250 ms, the etcd-mixin's
// etcdHighCommitDurations line (backend commit p99 over 0.25 s), so that its page counts the
// commits over it instead of interpolating inside the 100-500 ms bucket.
var CommitBuckets = []float64{100e-6, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.25, 0.5, 1}

// NativeBucketFactor is the growth factor of the native histogram buckets asked for; the
// schema that meets it is 3 (2^(1/8) ≈ 1.09), see LatencyVec.
const NativeBucketFactor = 1.1

// Metrics holds every metric the exporter exposes. They live for the life of the process:
// a reload deletes the series of targets that went away, so counters of targets that
// stay are never reset.
type Metrics struct {
	recorders map[string]recorder // by probe kind; each kind's own metrics are in all

	seqBytes, seqDuration *prometheus.CounterVec
	seqThroughput         *prometheus.GaugeVec

	runs, errors *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	lastSuccess  *prometheus.GaugeVec
	ioOps        *prometheus.CounterVec
	ioBytes      *prometheus.CounterVec
	cpuWait      *prometheus.CounterVec

	busy, otherIOPS *prometheus.GaugeVec
	targetInfo      *prometheus.GaugeVec

	reloadTimestamp prometheus.Gauge
	reloadOK        prometheus.Gauge

	inflight *inflightCollector

	all []prometheus.Collector // everything above, plus the build info
}

// Skip reasons of diskprobe_probe_skipped_total.
const (
	SkipInflight     = "inflight"       // the previous round of the probe had not finished
	SkipPreparing    = "preparing"      // the read probe file, or the commit probe's, is still being written
	SkipLowFreeSpace = "low_free_space" // free space under limits.min_free
)

// NewMetrics creates the metrics and registers them, with the build info, on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	tp := []string{"target", "probe"}
	m := &Metrics{
		recorders: map[string]recorder{},
		seqBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "sequential_bytes_total",
			Help: "Bytes moved by the sequential probes."}, []string{"target", "direction"}),
		seqDuration: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "sequential_duration_seconds_total",
			Help: "Time spent inside the sequential probes' reads and writes (and seqwrite's final fdatasync); rate limit waits excluded."}, []string{"target", "direction"}),
		seqThroughput: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "sequential_throughput_bytes_per_second",
			Help: "Throughput of the last sequential round: its bytes over its time inside the I/O calls."}, []string{"target", "direction"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_runs_total",
			Help: "Probe rounds run, failed or not."}, tp),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_errors_total",
			Help: "Probe rounds that failed, and operations found stuck in the kernel past limits.timeout."}, tp),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_skipped_total",
			Help: "Probe rounds not run, by reason: inflight (previous round still running, e.g. I/O stuck in the kernel), preparing (read probe file still being written), low_free_space (under limits.min_free)."}, []string{"target", "probe", "reason"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "probe_last_success_timestamp_seconds",
			Help: "Unix time the probe last completed a round without error."}, tp),
		ioOps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_io_operations_total",
			Help: "I/O operations the prober itself issued (a write with its fdatasync counts once), including probe file preparation."}, tp),
		ioBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_io_bytes_total",
			Help: "Bytes the prober itself read or wrote, including probe file preparation."}, tp),
		cpuWait: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "probe_cpu_wait_seconds_total",
			Help: "Time the prober's I/O thread spent runnable but waiting for a CPU across the probe's timed calls (its schedstat run_delay, read outside the timed regions): the part of the latency metrics' time that was the host's CPUs, not the disk. Absent where the kernel does not report it."}, tp),
		busy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_busy_ratio",
			Help: "Share of time the target's device had I/O in flight (/proc/diskstats io_ticks), measured in the gaps between the prober's I/O on the disk (of all its targets, at least 1 s of them), so that the prober's own I/O is left out."}, []string{"target"}),
		otherIOPS: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_other_iops",
			Help: "I/O operations per second completed on the target's device by others, measured in the gaps between the prober's I/O on the disk (of all its targets, at least 1 s of them)."}, []string{"target"}),
		targetInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "target_info",
			Help: "Always 1: what each target is and which device holds it."}, []string{"target", "path", "kind", "device", "model", "serial", "rotational"}),
		reloadTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load."}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_successful",
			Help: "1 if the last configuration load succeeded, 0 if it failed and the previous configuration is still running."}),
		inflight: newInflightCollector(),
	}
	m.all = []prometheus.Collector{
		m.seqBytes, m.seqDuration, m.seqThroughput,
		m.runs, m.errors, m.skipped, m.lastSuccess, m.ioOps, m.ioBytes, m.cpuWait,
		m.busy, m.otherIOPS, m.targetInfo,
		m.reloadTimestamp, m.reloadOK,
		m.inflight,
		versioncollector.NewCollector("diskprobe_exporter"),
	}
	for _, k := range config.ProbeKinds {
		m.recorders[k.Name] = probeKinds[k.Name].metrics(m)
	}
	reg.MustRegister(m.all...)
	return m
}

// newLatency makes a probe kind's own latency vector (see NewLatencyVec) and adds it to m.
func (m *Metrics) newLatency(name, help string, buckets []float64) *LatencyVec {
	v := NewLatencyVec(name, help, buckets)
	m.all = append(m.all, v)
	return v
}

// SetReload records the outcome of a configuration load.
func (m *Metrics) SetReload(ok bool, now time.Time) {
	if ok {
		m.reloadOK.Set(1)
		m.reloadTimestamp.Set(float64(now.Unix()))
	} else {
		m.reloadOK.Set(0)
	}
}

// forget deletes every series of a target that is no longer configured.
func (m *Metrics) forget(target string) {
	l := prometheus.Labels{"target": target}
	for _, c := range m.all {
		if v, ok := c.(interface {
			DeletePartialMatch(prometheus.Labels) int
		}); ok {
			v.DeletePartialMatch(l)
		}
	}
}

// MetricNames lists every metric family the exporter registers, read from the
// descriptors of the real collectors, so that rules and dashboards can be checked
// against what is really exposed.
func MetricNames() []string {
	m := NewMetrics(prometheus.NewRegistry())
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range m.all {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		// Desc has no name accessor; its String() is `Desc{fqName: "name", ...}`.
		s := d.String()
		if i := strings.Index(s, `fqName: "`); i >= 0 {
			s = s[i+len(`fqName: "`):]
			names = append(names, s[:strings.IndexByte(s, '"')])
		}
	}
	return names
}
