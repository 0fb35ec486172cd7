package arrival

import "github.com/prometheus/client_golang/prometheus"

// The stages of an attempt, in order: the label of the time histogram (all but create)
// and of the failures (the stage that was refused or did not complete in time).
const (
	StageCreate  = "create"  // the PVC and the writer pod created
	StageBound   = "bound"   // the PVC Bound
	StageRunning = "running" // the writer's container started
	StageWritten = "written" // the writer wrote, fdatasynced and exited 0: the pod Succeeded
	StageDeleted = "deleted" // the PVC gone after the delete calls
)

var (
	timedStages = []string{StageBound, StageRunning, StageWritten, StageDeleted}
	allStages   = []string{StageCreate, StageBound, StageRunning, StageWritten, StageDeleted}
)

const (
	secondsName     = "diskprobe_storageclass_arrival_seconds"
	attemptsName    = "diskprobe_storageclass_arrival_attempts_total"
	failuresName    = "diskprobe_storageclass_arrival_failures_total"
	lastSuccessName = "diskprobe_storageclass_arrival_last_success_timestamp_seconds"
)

// MetricNames are the names of the metrics the arrival command registers, for the test
// that compares docs/metrics.md with what the binaries expose.
func MetricNames() []string {
	return []string{secondsName, attemptsName, failuresName, lastSuccessName}
}

// metrics are the arrival prober's series. Every class's exist from the start, at 0, so
// that a class that never succeeds is a series an alert can read.
type metrics struct {
	seconds     *prometheus.HistogramVec
	attempts    *prometheus.CounterVec
	failures    *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, classes []string) (*metrics, error) {
	m := &metrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: secondsName,
			Help: "Seconds from the arrival prober's PVC create call to its stage: the PVC Bound (bound), the writer pod's container started (running), the pod Succeeded after its write and fdatasync (written); deleted: from the delete calls to the PVC gone. Observed by polling every 500ms.",
			// A local volume binds in about a second, a cloud volume in tens of seconds;
			// the top is the default --timeout's 300s and twice it.
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"storage_class", "stage"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: attemptsName,
			Help: "Attempts of the arrival prober: a PVC of the class and a pod writing to it, created, then deleted.",
		}, []string{"storage_class"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: failuresName,
			Help: "Attempts of the arrival prober that failed, by the stage that was refused (create) or did not complete within --timeout (the log says why).",
		}, []string{"storage_class", "stage"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: lastSuccessName,
			Help: "Unix time of the class's last attempt that completed every stage; 0 before the first.",
		}, []string{"storage_class"}),
	}
	for _, c := range []prometheus.Collector{m.seconds, m.attempts, m.failures, m.lastSuccess} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, class := range classes {
		m.attempts.WithLabelValues(class)
		m.lastSuccess.WithLabelValues(class)
		for _, stage := range timedStages {
			m.seconds.WithLabelValues(class, stage)
		}
		for _, stage := range allStages {
			m.failures.WithLabelValues(class, stage)
		}
	}
	return m, nil
}
