package collector

import (
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/ebsnvme"
)

// ebsReadInterval is how often the statistics page of each EBS volume a target is on is
// read, and how soon a new target's volume is first read. The page's counters are
// cumulative, so a scrape reads them at most this old and loses nothing; AWS keeps them at
// one-second resolution and warns that asking more often than once a second may queue the
// request behind other admin commands.
const ebsReadInterval = 10 * time.Second

// ebsReadStuckAfter is when an outstanding read is logged, once, as stuck: past the
// kernel's default admin timeout (60 s), after which it should have failed by itself.
const ebsReadStuckAfter = 90 * time.Second

// ebsReader reads the statistics page of the NVMe namespace at path, device major:minor
// (ebsnvme.Read; tests give a fake).
type ebsReader func(path string, major, minor uint32) (ebsnvme.Stats, error)

// ebsTarget is a target on an EBS volume: its name and its whole disk (nvme1n1).
type ebsTarget struct{ name, disk string }

// ebsVolumes reads, off the scrape path, the statistics page of the EBS volumes the
// targets are on: one goroutine wakes every ebsReadInterval and starts a read for each
// volume whose last read has returned. The ioctl can hang on a sick device and cannot be
// cancelled, so a volume keeps at most one read outstanding, a hung read blocks only its
// own goroutine, and a scrape reads the last page read and when (under mu, which nothing
// holds across I/O). Devices that are not EBS volumes are never opened.
type ebsVolumes struct {
	paths   device.Paths
	devDir  string             // where the device nodes are: /dev
	targets func() []ebsTarget // the running targets on EBS volumes
	logger  *slog.Logger

	mu     sync.Mutex
	read   ebsReader // under mu only so that tests can swap it
	byDisk map[string]*ebsVolume

	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
}

// ebsVolume is what is known of one volume; ebsVolumes.mu guards it.
type ebsVolume struct {
	reading     bool      // a read is outstanding
	started     time.Time // when it started
	stuckLogged bool      // it was logged as stuck

	stats  *ebsnvme.Stats // the last page read, nil before the first
	readAt time.Time      // when it was read
	state  string         // the last read's error, "" since a success: logged when it changes
}

func newEBSVolumes(paths device.Paths, targets func() []ebsTarget, read ebsReader, logger *slog.Logger) *ebsVolumes {
	return &ebsVolumes{paths: paths, devDir: "/dev", read: read, targets: targets, logger: logger,
		byDisk: map[string]*ebsVolume{}, stopped: make(chan struct{}), done: make(chan struct{})}
}

// isEBS is whether a device is an EBS volume, by the model its NVMe controller reports.
// Anything else is never opened: not an error, not a log line.
func isEBS(dev device.Info) bool { return dev.Model == ebsnvme.Model }

// ebsTargets lists the running targets whose device is an EBS volume.
func (s *Scheduler) ebsTargets() []ebsTarget {
	var out []ebsTarget
	for _, r := range s.running() {
		if dev, ok := r.device(); ok && isEBS(dev) {
			out = append(out, ebsTarget{name: r.name, disk: dev.Disk})
		}
	}
	return out
}

// device is the target's device once its path has answered. worker.inspected writes it
// before it sets status.inspected and never again, so reading it after seeing that flag
// needs no lock.
func (r *runner) device() (device.Info, bool) {
	if !r.status.inspected.Load() {
		return device.Info{}, false
	}
	return r.worker.dev, r.worker.devOK
}

// start reads the volumes until stop.
func (v *ebsVolumes) start() {
	go func() {
		defer close(v.done)
		tick := time.NewTicker(ebsReadInterval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				v.refresh(time.Now())
			case <-v.stopped:
				return
			}
		}
	}()
}

// stop ends the loop; reads still outstanding are left to return by themselves.
func (v *ebsVolumes) stop() {
	v.stopOnce.Do(func() { close(v.stopped) })
	<-v.done
}

// refresh starts a read of every volume of the targets that has none outstanding, and
// forgets the volumes no target is on any more.
func (v *ebsVolumes) refresh(now time.Time) {
	want := map[string]bool{}
	for _, t := range v.targets() {
		want[t.disk] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for disk, vol := range v.byDisk {
		if !want[disk] && !vol.reading {
			delete(v.byDisk, disk)
		}
	}
	for disk := range want {
		vol := v.byDisk[disk]
		if vol == nil {
			vol = &ebsVolume{}
			v.byDisk[disk] = vol
		}
		if vol.reading {
			if age := now.Sub(vol.started); age > ebsReadStuckAfter && !vol.stuckLogged {
				vol.stuckLogged = true
				v.logger.Warn("reading an EBS volume's statistics has not returned: not asking it again until it does", "device", disk, "age", age.Round(time.Second))
			}
			continue
		}
		vol.reading, vol.started, vol.stuckLogged = true, now, false
		go v.readVolume(disk, vol, v.read)
	}
}

// readVolume reads one volume's page, on a goroutine of its own: it may never return.
func (v *ebsVolumes) readVolume(disk string, vol *ebsVolume, read ebsReader) {
	stats, err := v.readDisk(disk, read)
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	vol.reading = false
	state := ""
	if err == nil {
		vol.stats, vol.readAt = &stats, now
	} else {
		state = err.Error()
	}
	if state == vol.state {
		return
	}
	vol.state = state
	switch {
	case err == nil:
		v.logger.Info("reading the EBS volume's own statistics", "device", disk)
	case errors.Is(err, fs.ErrPermission):
		v.logger.Warn("cannot read the EBS volume's own statistics: the NVMe admin command needs CAP_SYS_ADMIN and read access to the device node (docs/volumes.md)", "device", disk, "err", err)
	default:
		v.logger.Warn("cannot read the EBS volume's own statistics", "device", disk, "err", err)
	}
}

func (v *ebsVolumes) readDisk(disk string, read ebsReader) (ebsnvme.Stats, error) {
	major, minor, err := v.paths.DiskNumber(disk)
	if err != nil {
		return ebsnvme.Stats{}, err
	}
	return read(filepath.Join(v.devDir, disk), major, minor)
}

// last is the last page read of a disk's volume and when, ok false before the first.
func (v *ebsVolumes) last(disk string) (stats *ebsnvme.Stats, readAt time.Time, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	vol := v.byDisk[disk]
	if vol == nil || vol.stats == nil {
		return nil, time.Time{}, false
	}
	return vol.stats, vol.readAt, true
}

// Limits of diskprobe_ebs_exceeded_seconds_total.
const (
	ebsLimitVolumeIOPS         = "volume_iops"
	ebsLimitVolumeThroughput   = "volume_throughput"
	ebsLimitInstanceIOPS       = "instance_iops"
	ebsLimitInstanceThroughput = "instance_throughput"
)

// ebsCollector exposes, at scrape time, the last statistics page read of each target's EBS
// volume. Targets on other devices have none of its series.
type ebsCollector struct {
	volumes *ebsVolumes // set by NewScheduler; nil: nothing to expose

	exceeded, ops, bytes, latency, queue, readAt *prometheus.Desc
}

func newEBSCollector() *ebsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_ebs_"+name, help, append([]string{"target"}, labels...), nil)
	}
	return &ebsCollector{
		exceeded: d("exceeded_seconds_total", "Time the target's EBS volume spent with demand over a limit, by its own count (NVMe log page 0xD0): volume_iops and volume_throughput are the volume's provisioned limits, instance_iops and instance_throughput the EC2 instance's EBS limits.", "limit"),
		ops:      d("io_operations_total", "Operations completed by the target's EBS volume, everyone's, by its own count.", "direction"),
		bytes:    d("io_bytes_total", "Bytes transferred by the target's EBS volume, everyone's, by its own count.", "direction"),
		latency:  d("io_latency_seconds", "Latency of the target's EBS volume's operations, everyone's, in the volume's own histogram bins; the sum is its total time of completed operations.", "direction"),
		queue:    d("queue_length", "Operations waiting on the target's EBS volume when its statistics were last read."),
		readAt:   d("last_read_timestamp_seconds", "Unix time the target's EBS volume's statistics were last read from the device."),
	}
}

func (c *ebsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.exceeded, c.ops, c.bytes, c.latency, c.queue, c.readAt} {
		ch <- d
	}
}

func (c *ebsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.volumes == nil {
		return
	}
	for _, t := range c.volumes.targets() {
		s, readAt, ok := c.volumes.last(t.disk)
		if !ok {
			continue
		}
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{t.name}, labels...)...)
		}
		counter(c.exceeded, micros(s.VolumeIOPSExceededMicros), ebsLimitVolumeIOPS)
		counter(c.exceeded, micros(s.VolumeThroughputExceededMicros), ebsLimitVolumeThroughput)
		counter(c.exceeded, micros(s.InstanceIOPSExceededMicros), ebsLimitInstanceIOPS)
		counter(c.exceeded, micros(s.InstanceThroughputExceededMicros), ebsLimitInstanceThroughput)
		counter(c.ops, float64(s.ReadOps), "read")
		counter(c.ops, float64(s.WriteOps), "write")
		counter(c.bytes, float64(s.ReadBytes), "read")
		counter(c.bytes, float64(s.WriteBytes), "write")
		ch <- ebsHistogram(c.latency, s.ReadLatency, s.ReadMicros, t.name, "read")
		ch <- ebsHistogram(c.latency, s.WriteLatency, s.WriteMicros, t.name, "write")
		ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(s.QueueLength), t.name)
		ch <- prometheus.MustNewConstMetric(c.readAt, prometheus.GaugeValue, float64(readAt.UnixNano())/1e9, t.name)
	}
}

// ebsHistogram is a device histogram as a Prometheus one: each bin's upper bound is a
// bucket edge (Parse has checked that they increase), and the sum is the device's total
// time of the direction's completed operations.
func ebsHistogram(d *prometheus.Desc, h ebsnvme.Histogram, totalMicros uint64, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bins))
	var cumulative uint64
	for _, b := range h.Bins {
		cumulative += b.Count
		buckets[micros(b.UpperMicros)] = cumulative
	}
	m, err := prometheus.NewConstHistogram(d, cumulative, micros(totalMicros), buckets, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

func micros(us uint64) float64 { return float64(us) / 1e6 }
