package collector

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

const namespace = "diskprobe"

// LatencyBuckets are the fdatasync and read histograms' classic bucket edges
// (probe.LatencyBuckets says why each edge is there).
var LatencyBuckets = probe.LatencyBuckets

// CommitBuckets are the commit histogram's (probe.CommitBuckets says why).
var CommitBuckets = probe.CommitBuckets

// NativeBucketFactor is the growth factor of the native histogram buckets asked for; the
// schema that meets it is 3 (2^(1/8) ≈ 1.09), see LatencyVec.
const NativeBucketFactor = 1.1

// Metrics holds every metric the exporter exposes. They live for the life of the process:
// a reload deletes the series of targets that went away, so counters of targets that
// stay are never reset.
type Metrics struct {
	kinds map[string]kindMetrics // by probe kind: its latency vectors, which are in all too

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

	// The device's ceiling (ceiling.Recogniser) and the volume's stated limits and burst
	// credit (ceiling.Credit), per target.
	ceilingIOPS, ceilingBytes, ceilingSince, atCeiling *prometheus.GaugeVec
	volumeLimitIOPS, volumeLimitBytes, volumeInfo      *prometheus.GaugeVec
	burstBalance, burstEmpty                           *prometheus.GaugeVec

	reloadTimestamp prometheus.Gauge
	reloadOK        prometheus.Gauge

	inflight *inflightCollector
	ebs      *ebsCollector
	vantage  *vantageCollector

	all []prometheus.Collector // everything above, plus the build info
}

// Skip reasons of diskprobe_probe_skipped_total.
const (
	SkipInflight     = "inflight"       // the previous round of the probe had not finished
	SkipPreparing    = "preparing"      // the probe's file (the read probe file, the commit probe's) is still being written
	SkipLowFreeSpace = "low_free_space" // free space under limits.min_free
)

// NewMetrics creates the metrics and registers them, with the build info, on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	tp := []string{"target", "probe"}
	m := &Metrics{
		kinds: map[string]kindMetrics{},
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
			Help: "Probe rounds not run, by reason: inflight (previous round still running, e.g. I/O stuck in the kernel), preparing (the probe's file still being written: the read probe file, the commit probe's database file), low_free_space (under limits.min_free), no_vantage (the target's vantage process could not be joined)."}, []string{"target", "probe", "reason"}),
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
		ceilingIOPS: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_ceiling_iops",
			Help: "I/O operations per second the target's whole device (everyone's I/O, /proc/diskstats) was recognised held at: flat for minutes while work waited, and never exceeded. Absent until recognised, and again once the device completes more than 1.1 times it."}, []string{"target", "direction"}),
		ceilingBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_ceiling_bytes_per_second",
			Help: "Bytes per second the target's whole device was recognised held at, as diskprobe_device_ceiling_iops."}, []string{"target", "direction"}),
		ceilingSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_ceiling_since_timestamp_seconds",
			Help: "Unix time the present ceiling of the target's device was first recognised."}, []string{"target"}),
		atCeiling: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "device_at_ceiling",
			Help: "1 while the target's device sits at its recognised ceiling with work waiting (the cap binds now), else 0."}, []string{"target"}),
		volumeLimitIOPS: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "volume_limit_iops",
			Help: "IOPS the target's volume was sold with (its volume block), by tier: baseline, and burst where it has a bucket."}, []string{"target", "tier"}),
		volumeLimitBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "volume_limit_bytes_per_second",
			Help: "Throughput the target's volume was sold with (its volume block), by tier: baseline, and burst where it has a bucket."}, []string{"target", "tier"}),
		volumeInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "volume_info",
			Help: "Always 1: the type of the target's volume as its volume block names it (custom for plain limits)."}, []string{"target", "type"}),
		burstBalance: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "volume_burst_balance_ratio",
			Help: "Estimated share of the volume's burst bucket left, 0 to 1: full at start, the device's completed I/O spent and the baseline earned (docs/volumes.md), emptied when the device is seen held at its baseline."}, []string{"target"}),
		burstEmpty: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "volume_burst_empty_seconds",
			Help: "Seconds until the volume's burst bucket is empty at the device's present rate; +Inf when it is not draining."}, []string{"target"}),
		targetInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "target_info",
			Help: "Always 1: what each target is and which device holds it."}, []string{"target", "path", "kind", "device", "model", "serial", "rotational"}),
		reloadTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load."}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_successful",
			Help: "1 if the last configuration load succeeded, 0 if it failed and the previous configuration is still running."}),
		inflight: newInflightCollector(),
		ebs:      newEBSCollector(),
		vantage:  newVantageCollector(),
	}
	m.all = []prometheus.Collector{
		m.seqBytes, m.seqDuration, m.seqThroughput,
		m.runs, m.errors, m.skipped, m.lastSuccess, m.ioOps, m.ioBytes, m.cpuWait,
		m.busy, m.otherIOPS, m.targetInfo,
		m.ceilingIOPS, m.ceilingBytes, m.ceilingSince, m.atCeiling,
		m.volumeLimitIOPS, m.volumeLimitBytes, m.volumeInfo, m.burstBalance, m.burstEmpty,
		m.reloadTimestamp, m.reloadOK,
		m.inflight, m.ebs, m.vantage,
		versioncollector.NewCollector("diskprobe_exporter"),
	}
	m.newKindMetrics()
	reg.MustRegister(m.all...)
	return m
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
