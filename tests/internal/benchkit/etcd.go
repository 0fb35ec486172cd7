package benchkit

import "time"

// EtcdEdges are etcd's wal_fsync bucket edges (seconds) up to 1 s: powers of two from 1 ms.
var EtcdEdges = []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024}

// EtcdDisk is one disk of the etcd comparison.
type EtcdDisk struct {
	Name    string
	Device  string
	Window  time.Duration
	Puts    int64 // etcd puts the load made in the window
	PutRate int   // puts a second the load aimed at

	// From Prometheus, over the window: etcd's wal_fsync and our fdatasync.
	EtcdSyncs, OurSyncs           float64
	EtcdShares, OurShares         []float64 // share ≤ each of EtcdEdges
	EtcdP50, EtcdP99              float64   // histogram_quantile from etcd's buckets
	OurP50, OurP99                float64   // histogram_quantile from our native buckets
	OurClassicP50, OurClassicP99  float64   // and from our classic buckets
	EtcdVerdictOK, OurVerdictOK   bool      // p99 under 10 ms
	CheckVerdict, CheckPerfResult string    // diskprobe_exporter check, etcdctl check perf
	CheckTime, CheckPerfTime      time.Duration
	CheckIO, CheckPerfIO          DiskIO
	CheckCommand, CheckPerfCmd    string
}

// DiskIO is what a command cost the device, from /proc/diskstats.
type DiskIO struct {
	Writes, Flushes uint64
	WrittenBytes    uint64
}
