package collector

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/ebsnvme"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// fakeEBSReader stands for the ioctl: it records each read and, while hold is open,
// does not return, as a read of a sick device.
type fakeEBSReader struct {
	mu    sync.Mutex
	calls []string
	hold  chan struct{}
	stats ebsnvme.Stats
}

func (f *fakeEBSReader) read(path string, major, minor uint32) (ebsnvme.Stats, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %d:%d", path, major, minor))
	f.mu.Unlock()
	if f.hold != nil {
		<-f.hold
	}
	return f.stats, nil
}

func (f *fakeEBSReader) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// ebsSysfs is a /sys whose class/block knows the given disks' device numbers.
func ebsSysfs(t *testing.T, disks map[string]string) device.Paths {
	t.Helper()
	sys := filepath.Join(t.TempDir(), "sys")
	for disk, number := range disks {
		dir := filepath.Join(sys, "class", "block", disk)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dev"), []byte(number+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return device.Paths{ProcFS: "/proc", SysFS: sys}
}

var testEBSStats = ebsnvme.Stats{
	ReadOps: 10, WriteOps: 20, ReadBytes: 4096, WriteBytes: 8192, ReadMicros: 1500, WriteMicros: 30_000,
	VolumeIOPSExceededMicros: 2_500_000, InstanceIOPSExceededMicros: 1000,
	QueueLength:  3,
	ReadLatency:  ebsnvme.Histogram{Bins: []ebsnvme.Bin{{LowerMicros: 0, UpperMicros: 100, Count: 4}, {LowerMicros: 100, UpperMicros: 1000, Count: 6}}},
	WriteLatency: ebsnvme.Histogram{Bins: []ebsnvme.Bin{{LowerMicros: 0, UpperMicros: 1000, Count: 15}, {LowerMicros: 1000, UpperMicros: 10_000, Count: 5}}},
}

const testEBSExposition = `
# HELP diskprobe_ebs_exceeded_seconds_total Time the target's EBS volume spent with demand over a limit, by its own count (NVMe log page 0xD0): volume_iops and volume_throughput are the volume's provisioned limits, instance_iops and instance_throughput the EC2 instance's EBS limits.
# TYPE diskprobe_ebs_exceeded_seconds_total counter
diskprobe_ebs_exceeded_seconds_total{limit="instance_iops",target="etcd"} 0.001
diskprobe_ebs_exceeded_seconds_total{limit="instance_throughput",target="etcd"} 0
diskprobe_ebs_exceeded_seconds_total{limit="volume_iops",target="etcd"} 2.5
diskprobe_ebs_exceeded_seconds_total{limit="volume_throughput",target="etcd"} 0
# HELP diskprobe_ebs_io_latency_seconds Latency of the target's EBS volume's operations, everyone's, in the volume's own histogram bins; the sum is its total time of completed operations.
# TYPE diskprobe_ebs_io_latency_seconds histogram
diskprobe_ebs_io_latency_seconds_bucket{direction="read",target="etcd",le="0.0001"} 4
diskprobe_ebs_io_latency_seconds_bucket{direction="read",target="etcd",le="0.001"} 10
diskprobe_ebs_io_latency_seconds_bucket{direction="read",target="etcd",le="+Inf"} 10
diskprobe_ebs_io_latency_seconds_sum{direction="read",target="etcd"} 0.0015
diskprobe_ebs_io_latency_seconds_count{direction="read",target="etcd"} 10
diskprobe_ebs_io_latency_seconds_bucket{direction="write",target="etcd",le="0.001"} 15
diskprobe_ebs_io_latency_seconds_bucket{direction="write",target="etcd",le="0.01"} 20
diskprobe_ebs_io_latency_seconds_bucket{direction="write",target="etcd",le="+Inf"} 20
diskprobe_ebs_io_latency_seconds_sum{direction="write",target="etcd"} 0.03
diskprobe_ebs_io_latency_seconds_count{direction="write",target="etcd"} 20
# HELP diskprobe_ebs_io_operations_total Operations completed by the target's EBS volume, everyone's, by its own count.
# TYPE diskprobe_ebs_io_operations_total counter
diskprobe_ebs_io_operations_total{direction="read",target="etcd"} 10
diskprobe_ebs_io_operations_total{direction="write",target="etcd"} 20
# HELP diskprobe_ebs_io_bytes_total Bytes transferred by the target's EBS volume, everyone's, by its own count.
# TYPE diskprobe_ebs_io_bytes_total counter
diskprobe_ebs_io_bytes_total{direction="read",target="etcd"} 4096
diskprobe_ebs_io_bytes_total{direction="write",target="etcd"} 8192
# HELP diskprobe_ebs_queue_length Operations waiting on the target's EBS volume when its statistics were last read.
# TYPE diskprobe_ebs_queue_length gauge
diskprobe_ebs_queue_length{target="etcd"} 3
`

var ebsValueMetrics = []string{"diskprobe_ebs_exceeded_seconds_total", "diskprobe_ebs_io_latency_seconds",
	"diskprobe_ebs_io_operations_total", "diskprobe_ebs_io_bytes_total", "diskprobe_ebs_queue_length"}

// scrapeBody gets /metrics from srv, failing the test if it does not answer within a
// minute: a scrape that waits for a hung device would never answer.
func scrapeBody(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("/metrics did not answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s, %v\n%s", resp.Status, err, body)
	}
	return string(body)
}

// TestMetricsAnswerWhileAnEBSStatisticsReadHangs: the NVMe admin command can hang on a
// sick device and cannot be cancelled. /metrics must answer all the same (without the
// volume's series until a read returns), later refreshes must not pile reads up behind the
// hung one, and once it returns its page is what the scrape shows.
func TestMetricsAnswerWhileAnEBSStatisticsReadHangs(t *testing.T) {
	reader := &fakeEBSReader{hold: make(chan struct{}), stats: testEBSStats}
	var log testenv.SyncBuffer
	v := newEBSVolumes(ebsSysfs(t, map[string]string{"nvme1n1": "259:1"}),
		func() []ebsTarget { return []ebsTarget{{name: "etcd", disk: "nvme1n1"}} },
		reader.read, slog.New(slog.NewTextHandler(&log, nil)))
	c := newEBSCollector()
	c.volumes = v
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	released := false
	defer func() {
		if !released {
			close(reader.hold)
		}
	}()

	start := time.Now()
	v.refresh(start)
	testenv.WaitFor(t, 30*time.Second, "the read to start", func() bool { return len(reader.called()) == 1 })
	if got := reader.called()[0]; got != "/dev/nvme1n1 259:1" {
		t.Errorf("read %q, want the namespace node with the disk's number from sysfs", got)
	}
	if body := scrapeBody(t, srv); strings.Contains(body, "diskprobe_ebs_") {
		t.Errorf("series before any read returned:\n%s", body)
	}
	for i := 1; i <= 5; i++ {
		v.refresh(start.Add(time.Duration(i) * ebsReadInterval))
	}
	// A read started in error would be a goroutine that has yet to run: give it a second.
	for deadline := time.Now().Add(time.Second); len(reader.called()) == 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(reader.called()); n != 1 {
		t.Errorf("%d reads started while the first hung; at most one may be outstanding per volume", n)
	}
	v.refresh(start.Add(2 * ebsReadStuckAfter))
	v.refresh(start.Add(3 * ebsReadStuckAfter))
	if n := strings.Count(log.String(), "has not returned"); n != 1 {
		t.Errorf("the hung read logged %d times, want once:\n%s", n, log.String())
	}
	scrapeBody(t, srv)

	close(reader.hold)
	released = true
	testenv.WaitFor(t, 30*time.Second, "the page to be exposed", func() bool {
		return strings.Contains(scrapeBody(t, srv), "diskprobe_ebs_queue_length")
	})
	if err := testutil.CollectAndCompare(c, strings.NewReader(testEBSExposition), ebsValueMetrics...); err != nil {
		t.Error(err)
	}
	readAt := -1.0
	for m := range collectAll(c) {
		if strings.Contains(m.Desc().String(), "last_read_timestamp_seconds") {
			readAt = dtoOf(t, m).GetGauge().GetValue()
		}
	}
	if readAt < float64(start.Unix()) {
		t.Errorf("last read at %v, before the test started (%d)", readAt, start.Unix())
	}
	v.refresh(time.Now())
	testenv.WaitFor(t, 30*time.Second, "a new read once the hung one returned", func() bool { return len(reader.called()) == 2 })
}

func dtoOf(t *testing.T, m prometheus.Metric) *dto.Metric {
	t.Helper()
	out := &dto.Metric{}
	if err := m.Write(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// collectAll gathers what c collects.
func collectAll(c prometheus.Collector) <-chan prometheus.Metric {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	return ch
}

// TestEBSStatisticsAreAskedOnlyOfEBSVolumes: a target on any other device (a local SSD,
// one without device context) is never opened or logged about, and its targets have no
// diskprobe_ebs_ series; a reload that removes the EBS target removes its series.
func TestEBSStatisticsAreAskedOnlyOfEBSVolumes(t *testing.T) {
	reader := &fakeEBSReader{stats: testEBSStats}
	var log testenv.SyncBuffer
	m := NewMetrics(prometheus.NewRegistry())
	s := NewScheduler(m, ebsSysfs(t, map[string]string{"nvme1n1": "259:1", "nvme0n1": "259:0", "sda": "8:0"}), RealClock{}, slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(func() { s.Stop(time.Second) })
	s.ebs.mu.Lock()
	s.ebs.read = reader.read
	s.ebs.mu.Unlock()

	devices := map[string]inspect.Result{
		"etcd":     {Device: device.Info{Name: "nvme1n1", Disk: "nvme1n1", Model: ebsnvme.Model}},
		"root":     {Device: device.Info{Name: "nvme0n1p1", Disk: "nvme0n1", Model: "Amazon EC2 NVMe Instance Storage"}},
		"local":    {Device: device.Info{Name: "sda2", Disk: "sda", Model: "Samsung SSD 870 EVO 1TB"}},
		"nfs":      {DeviceErr: errors.New("nfs at /mnt has no block device")},
		"etcd-wal": {Device: device.Info{Name: "nvme1n1", Disk: "nvme1n1", Model: ebsnvme.Model}},
	}
	plan := func(names ...string) *Plan {
		cfg := fsyncTargets(t, "x", len(names))
		p := &Plan{file: "test.yml", wait: time.Second}
		for i, name := range names {
			tg := cfg.Targets[i]
			tg.Name = name
			tg.Probe[config.ProbeFsync].Interval = time.Hour
			res := devices[name]
			res.Target = tg
			p.targets = append(p.targets, planned{parsed: tg, res: &res})
		}
		return p
	}
	if err := s.Apply(plan("etcd", "root", "local", "nfs", "etcd-wal")); err != nil {
		t.Fatal(err)
	}
	s.ebs.refresh(time.Now())
	testenv.WaitFor(t, 30*time.Second, "the EBS volume's page", func() bool {
		_, _, ok := s.ebs.last("nvme1n1")
		return ok
	})
	if got := reader.called(); len(got) != 1 || got[0] != "/dev/nvme1n1 259:1" {
		t.Errorf("reads %q; want one, of the EBS volume the two targets share", got)
	}
	if strings.Contains(log.String(), "statistics") && !strings.Contains(log.String(), "device=nvme1n1") {
		t.Errorf("a log line about another device's statistics:\n%s", log.String())
	}
	exposed := map[string]int{}
	for metric := range collectAll(m.ebs) {
		exposed[labelValue(dtoOf(t, metric), "target")]++
	}
	if exposed["etcd"] != 12 || exposed["etcd-wal"] != 12 || len(exposed) != 2 {
		t.Errorf("series per target %v; want 12 for each target on the EBS volume, none for the others", exposed)
	}

	if err := s.Apply(plan("root", "local")); err != nil {
		t.Fatal(err)
	}
	for metric := range collectAll(m.ebs) {
		t.Errorf("series after the EBS targets were removed: %v", dtoOf(t, metric))
	}
}

// TestAnEBSReadThatKeepsFailingIsLoggedOnce: a volume the exporter may not read (no
// CAP_SYS_ADMIN, the usual case) is read every 10 s for the life of the process; the log
// says so when it starts failing, when the reason changes and when it recovers, not at
// every read.
func TestAnEBSReadThatKeepsFailingIsLoggedOnce(t *testing.T) {
	var mu sync.Mutex
	var fail error = &os.PathError{Op: "NVMe Get Log Page 0xD0", Path: "/dev/nvme1n1", Err: syscall.EPERM}
	reads := 0
	read := func(string, uint32, uint32) (ebsnvme.Stats, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return testEBSStats, fail
	}
	var log testenv.SyncBuffer
	v := newEBSVolumes(ebsSysfs(t, map[string]string{"nvme1n1": "259:1"}),
		func() []ebsTarget { return []ebsTarget{{name: "etcd", disk: "nvme1n1"}} },
		read, slog.New(slog.NewTextHandler(&log, nil)))
	readsDone := func(n int) func() bool {
		return func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			return reads == n && !v.byDisk["nvme1n1"].reading
		}
	}
	for i := 1; i <= 5; i++ {
		v.refresh(time.Now())
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("read %d", i), readsDone(i))
	}
	if n := strings.Count(log.String(), "cannot read the EBS volume's own statistics"); n != 1 {
		t.Errorf("5 failed reads logged %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "needs CAP_SYS_ADMIN") {
		t.Errorf("a permission error without the privilege it needs:\n%s", log.String())
	}
	if _, _, ok := v.last("nvme1n1"); ok {
		t.Error("a page from reads that all failed")
	}
	mu.Lock()
	fail = nil
	mu.Unlock()
	v.refresh(time.Now())
	testenv.WaitFor(t, 30*time.Second, "read 6", readsDone(6))
	if !strings.Contains(log.String(), "reading the EBS volume's own statistics") {
		t.Errorf("the recovery is not logged:\n%s", log.String())
	}
}
