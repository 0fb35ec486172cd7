package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The device's ceiling, on the real kernel: a loop device capped by a blkio throttle
// that the exporter and a neighbour (fio, a process of its own) share, as etcd, the probe
// and the neighbour share a cloud volume's cap. A limit on a parent cgroup does not bind
// a child here: the throttled processes are in the cgroup that carries it. The images are
// in /dev/shm so that a flush of this machine's own disk cannot pass for a wait.
//
// The probes run every 2 s rather than at their defaults (15 s) so that the recogniser's
// 10 s windows close on time; what it takes at the defaults is measured by
// TestDeviceCeilingAtTheDefaultProbeRate (DISKPROBE_CEILING_DEFAULT_RATE=1).

// ceilingTarget is the target's configuration: the fsync and randread probes, every
// interval ("" for their defaults), and a volume block when one is given.
func ceilingTarget(dir, interval, volume string) string {
	probes := "    fsync: {}\n    randread: {file_size: 16MiB}\n"
	if interval != "" {
		probes = fmt.Sprintf("    fsync: {interval: %s, ops: 5, file_size: 4MiB}\n    randread: {interval: %s, ops: 5, file_size: 16MiB}\n", interval, interval)
	}
	cfg := "targets:\n  - name: capped\n    path: " + dir + "\n" + probes + "    limits: {min_free: 0}\n"
	if volume != "" {
		cfg += "    volume: " + volume + "\n"
	}
	return cfg
}

// ceilingSample is what one scrape says of the target's ceiling.
type ceilingSample struct {
	at        time.Duration // since the neighbour started
	atCeiling float64       // -1 when absent
	iops      map[string]float64
	bytes     map[string]float64
	balance   float64 // -1 when absent
	emptyIn   float64
}

func readCeiling(f families, at time.Duration) ceilingSample {
	s := ceilingSample{at: at, atCeiling: -1, balance: -1, iops: map[string]float64{}, bytes: map[string]float64{}}
	if v, ok := framework.Value(f, "diskprobe_device_at_ceiling", map[string]string{"target": "capped"}); ok {
		s.atCeiling = v
	}
	for _, dir := range []string{"read", "write", "total"} {
		if v, ok := framework.Value(f, "diskprobe_device_ceiling_iops", map[string]string{"target": "capped", "direction": dir}); ok {
			s.iops[dir] = v
		}
		if v, ok := framework.Value(f, "diskprobe_device_ceiling_bytes_per_second", map[string]string{"target": "capped", "direction": dir}); ok {
			s.bytes[dir] = v
		}
	}
	if v, ok := framework.Value(f, "diskprobe_volume_burst_balance_ratio", map[string]string{"target": "capped"}); ok {
		s.balance = v
		s.emptyIn, _ = framework.Value(f, "diskprobe_volume_burst_empty_seconds", map[string]string{"target": "capped"})
	}
	return s
}

// watchCeiling scrapes every second for d, or until done says to stop.
func watchCeiling(t *testing.T, e *framework.Exporter, start time.Time, d time.Duration, done func(ceilingSample) bool) []ceilingSample {
	var out []ceilingSample
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Second) {
		f, _, err := e.Scrape(5 * time.Second)
		if err != nil {
			continue
		}
		s := readCeiling(f, time.Since(start))
		out = append(out, s)
		if done != nil && done(s) {
			break
		}
	}
	alive(t, e)
	return out
}

// neighbour runs fio as a process of its own, in cg when cg is not nil (it joins before
// its first I/O); it is killed in cleanup. Its jobs are threads (--thread): a forked job
// would outlive the kill and hold the mount.
func neighbour(t *testing.T, cg *testenv.Cgroup, dir string, args ...string) *testenv.Process {
	t.Helper()
	fio := "exec fio --name=neighbour --thread --directory=" + dir + " --time_based --runtime=3600 --output=/dev/null " + strings.Join(args, " ")
	if cg != nil {
		fio = "echo $$ > " + filepath.Join(cg.Path, "cgroup.procs") + " && " + fio
	}
	return testenv.StartProcess(t, "sh", "-c", fio)
}

func devNumbers(t *testing.T, dev string) string {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
}

// recognised returns the first sample at which want holds, and how many times
// at_ceiling changed after it.
func recognised(samples []ceilingSample, want func(ceilingSample) bool) (first *ceilingSample, flips int) {
	for i := range samples {
		switch {
		case first == nil && want(samples[i]):
			first = &samples[i]
		case first != nil && samples[i-1].atCeiling != samples[i].atCeiling:
			flips++
		}
	}
	return first, flips
}

func within(got, want, share float64) bool { return math.Abs(got-want) <= share*want }

func TestDeviceCeiling(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	t.Run("WriteIOPSCapIsNamedWithinMinutes", func(t *testing.T) {
		t.Parallel()
		testCap(t, "2s", "blkio.throttle.write_iops_device", 100,
			[]string{"--rw=randwrite", "--bs=4k", "--size=8m", "--ioengine=libaio", "--iodepth=4", "--direct=1"},
			func(s ceilingSample) float64 { return s.iops["write"] }, "write IOPS")
	})
	t.Run("ReadBandwidthCapIsNamedWithinMinutes", func(t *testing.T) {
		t.Parallel()
		testCap(t, "2s", "blkio.throttle.read_bps_device", 2<<20,
			[]string{"--rw=randread", "--bs=16k", "--size=16m", "--ioengine=libaio", "--iodepth=4", "--direct=1"},
			func(s ceilingSample) float64 { return s.bytes["read"] }, "read bytes/s")
	})
	t.Run("SickDeviceWhoseThroughputFallsIsNeverCalledCapped", func(t *testing.T) {
		t.Parallel()
		testSickDeviceIsNotCapped(t)
	})
	t.Run("SteadyNeighbourOnAFreeDeviceIsNotCapped", func(t *testing.T) {
		t.Parallel()
		_, dir := testenv.RAMLoopExt4(t, 256<<20)
		e := framework.StartExporter(t, framework.WriteConfig(t, ceilingTarget(dir, "2s", "")))
		start := time.Now()
		neighbour(t, nil, dir, "--rw=randwrite", "--bs=4k", "--size=8m", "--ioengine=libaio", "--iodepth=4", "--direct=1", "--rate_iops=300")
		samples := watchCeiling(t, e, start, 3*time.Minute, nil)
		notCapped(t, samples, "a device that keeps up with a steady 300 IOPS neighbour")
	})
	t.Run("BurstBalanceAndForecastFollowTheController", func(t *testing.T) {
		t.Parallel()
		testBurstBucket(t)
	})
}

// testCap throttles a RAM loop device to limit (throttle is the blkio file), puts the
// exporter and a fio neighbour in the cgroup, and waits for the ceiling of level to be
// named within 10 % and the device called at it.
func testCap(t *testing.T, interval, throttle string, limit float64, fioArgs []string, level func(ceilingSample) float64, what string) {
	dev, dir := testenv.RAMLoopExt4(t, 256<<20)
	var cg *testenv.Cgroup
	if strings.Contains(throttle, "bps") {
		cg = testenv.ThrottleReadBandwidth(t, dev, int64(limit))
	} else {
		cg = testenv.ThrottleWrites(t, dev, int(limit))
	}
	e := framework.StartExporter(t, framework.WriteConfig(t, ceilingTarget(dir, interval, "")))
	cg.Add(e.Pid())
	start := time.Now()
	neighbour(t, cg, dir, fioArgs...)
	named := func(s ceilingSample) bool { return s.atCeiling == 1 && within(level(s), limit, 0.10) }
	// Until named, then half a minute more to see whether at_ceiling holds.
	var namedAt time.Duration
	samples := watchCeiling(t, e, start, 7*time.Minute, func(s ceilingSample) bool {
		if namedAt == 0 && named(s) {
			namedAt = s.at
		}
		return namedAt > 0 && s.at > namedAt+30*time.Second
	})
	first, flips := recognised(samples, named)
	if first == nil {
		last := samples[len(samples)-1]
		t.Fatalf("capped at %g %s: not named within 10%% in %v (last: at_ceiling %g, IOPS %v, bytes/s %v)",
			limit, what, last.at.Round(time.Second), last.atCeiling, last.iops, last.bytes)
	}
	t.Logf("capped at %g %s: named %.1f (%+.1f%%) after %v, probes every %q (\"\": defaults); at_ceiling changed %d times in the %v after",
		limit, what, level(*first), 100*(level(*first)/limit-1), first.at.Round(time.Second), interval, flips,
		(samples[len(samples)-1].at - first.at).Round(time.Second))
}

// notCapped fails when any sample names a ceiling or says at_ceiling 1.
func notCapped(t *testing.T, samples []ceilingSample, what string) {
	t.Helper()
	if len(samples) == 0 {
		t.Fatal("no scrape answered")
	}
	for _, s := range samples {
		if s.atCeiling == 1 || len(s.iops) > 0 || len(s.bytes) > 0 {
			t.Fatalf("%s was called capped after %v: at_ceiling %g, IOPS %v, bytes/s %v", what, s.at.Round(time.Second), s.atCeiling, s.iops, s.bytes)
		}
	}
	if samples[len(samples)-1].atCeiling != 0 {
		t.Errorf("%s: at_ceiling absent after %v; want 0 once the device has context", what, samples[len(samples)-1].at.Round(time.Second))
	}
	t.Logf("%s: not called capped in %v (%d scrapes)", what, samples[len(samples)-1].at.Round(time.Second), len(samples))
}

// testSickDeviceIsNotCapped puts the loop device's image on a FUSE mount whose fsync gets
// slower, as a failing disk's latency grows, and then stays slow: four etcd-like writers
// (write, fdatasync) wait on it, its throughput falls as its latency rises, then holds
// flat at the slow level. Flat with work waiting is what a cap looks like too; what tells
// them apart is that the device did much more minutes before.
func testSickDeviceIsNotCapped(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	_, dir := testenv.LoopExt4In(t, h.Dir, 256<<20)
	e := framework.StartExporter(t, framework.WriteConfig(t, ceilingTarget(dir, "2s", "")))
	start := time.Now()
	h.Delay(2*time.Millisecond, testenv.OpFsync)
	neighbour(t, nil, dir, "--rw=randwrite", "--bs=4k", "--size=8m", "--ioengine=sync", "--fdatasync=1", "--numjobs=4")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, d := range []time.Duration{3, 5, 8, 12, 18, 27, 40} {
			select {
			case <-stop:
				return
			case <-time.After(12 * time.Second):
			}
			h.Delay(d*time.Millisecond, testenv.OpFsync)
		}
	}()
	samples := watchCeiling(t, e, start, 4*time.Minute, nil)
	close(stop)
	wg.Wait()
	h.Delay(0, testenv.OpFsync)
	notCapped(t, samples, "a device whose fsync slowed from 2 to 40 ms and stayed there")
}

// testBurstBucket is a gp2-like bucket scaled down: baseline 100 IOPS, burst 1,000, a
// bucket of 60,000 I/Os. A controller of the test's own reads the device's completions
// every 100 ms, keeps the bucket by the same rules the exporter is told, and sets the
// throttle to the burst while the bucket holds credits, else to the baseline; its log is
// the truth the exporter's estimate is scored against.
func testBurstBucket(t *testing.T) {
	const (
		baseline, burst, bucket = 100.0, 1000.0, 60000.0
	)
	dev, dir := testenv.RAMLoopExt4(t, 256<<20)
	cg := testenv.ThrottleWrites(t, dev, int(burst))
	e := framework.StartExporter(t, framework.WriteConfig(t, ceilingTarget(dir, "2s",
		fmt.Sprintf("{iops: %g, burst: {iops: %g, bucket: %g}}", baseline, burst, bucket))))
	cg.Add(e.Pid())
	// The exporter's first window needs its first units: let it start full, as the
	// controller does, then start the load.
	framework.WaitMetric(t, e, time.Minute, "the burst balance published", func(f families) bool {
		_, ok := framework.Value(f, "diskprobe_volume_burst_balance_ratio", map[string]string{"target": "capped"})
		return ok
	})
	ctl := startController(t, dev, cg, baseline, burst, bucket)
	start := ctl.start
	neighbour(t, cg, dir, "--rw=randwrite", "--bs=4k", "--size=8m", "--ioengine=libaio", "--iodepth=4", "--direct=1")
	samples := watchCeiling(t, e, start, 150*time.Second, nil)
	log := ctl.stop()
	emptyAt, ok := log.emptyAt()
	if !ok {
		t.Fatalf("the controller's bucket never emptied in %v (balance %.0f at the end): the neighbour did not drain it", samples[len(samples)-1].at, log[len(log)-1].balance)
	}
	var sumErr, maxErr float64
	var n int
	var forecastErrs []float64
	for _, s := range samples {
		if s.balance < 0 {
			continue
		}
		truth := log.balanceAt(s.at) / bucket
		d := math.Abs(s.balance - truth)
		sumErr += d
		maxErr = max(maxErr, d)
		n++
		// Forecasts made while both say the bucket drains.
		if truth > 0 && s.balance > 0 && !math.IsInf(s.emptyIn, 1) && s.at < emptyAt {
			forecastErrs = append(forecastErrs, (s.at + time.Duration(s.emptyIn*float64(time.Second)) - emptyAt).Seconds())
		}
	}
	if n == 0 {
		t.Fatal("the exporter published no balance")
	}
	var sumF, maxF float64
	for _, f := range forecastErrs {
		sumF += math.Abs(f)
		maxF = max(maxF, math.Abs(f))
	}
	meanF := sumF / float64(max(len(forecastErrs), 1))
	t.Logf("burst bucket (baseline %g, burst %g, %g I/Os): the controller's emptied after %v; balance ratio error over %d scrapes: mean %.3f, max %.3f; forecast of the empty time over %d scrapes: mean |error| %.1f s, max %.1f s",
		baseline, burst, bucket, emptyAt.Round(100*time.Millisecond), n, sumErr/float64(n), maxErr, len(forecastErrs), meanF, maxF)
	// Both count the same device's completions; the exporter only later (at its units,
	// about every second) and over a second or more. Loose enough for a loaded machine.
	if mean := sumErr / float64(n); mean > 0.10 {
		t.Errorf("balance ratio off the controller's by %.3f on average, want at most 0.10", mean)
	}
	if len(forecastErrs) == 0 {
		t.Error("no forecast of the empty time while the bucket drained")
	} else if meanF > 20 {
		t.Errorf("the empty time forecast was off by %.1f s on average, want at most 20 s (the bucket drains in ~%v)", meanF, emptyAt.Round(time.Second))
	}
}

// controllerEntry is one step of the controller's log.
type controllerEntry struct {
	at      time.Duration
	balance float64
	limit   float64
}

type controllerLog []controllerEntry

// emptyAt is when the bucket first emptied.
func (l controllerLog) emptyAt() (time.Duration, bool) {
	for _, e := range l {
		if e.balance <= 0 {
			return e.at, true
		}
	}
	return 0, false
}

// balanceAt is the balance the log had at at (the last entry before it).
func (l controllerLog) balanceAt(at time.Duration) float64 {
	b := l[0].balance
	for _, e := range l {
		if e.at > at {
			break
		}
		b = e.balance
	}
	return b
}

type controller struct {
	start time.Time
	done  chan struct{}
	log   controllerLog
	wg    sync.WaitGroup
}

func (c *controller) stop() controllerLog {
	close(c.done)
	c.wg.Wait()
	return c.log
}

// startController runs the bucket's controller until stop.
func startController(t *testing.T, dev string, cg *testenv.Cgroup, baseline, burst, size float64) *controller {
	stat := filepath.Join("/sys/block", filepath.Base(dev), "stat")
	rule := filepath.Join(cg.Path, "blkio.throttle.write_iops_device")
	numbers := devNumbers(t, dev)
	completed := func() float64 {
		data, err := os.ReadFile(stat)
		if err != nil {
			return math.NaN()
		}
		f := strings.Fields(string(data))
		var n float64
		for _, i := range []int{0, 4, 11} { // reads, writes, discards completed
			if i < len(f) {
				v, _ := strconv.ParseFloat(f[i], 64)
				n += v
			}
		}
		return n
	}
	c := &controller{start: time.Now(), done: make(chan struct{})}
	balance, limit := size, burst
	last, lastAt := completed(), c.start
	c.log = append(c.log, controllerEntry{0, balance, limit})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-tick.C:
			}
			now, n := time.Now(), completed()
			if math.IsNaN(n) {
				continue
			}
			dt := now.Sub(lastAt).Seconds()
			balance = min(max(balance+baseline*dt-(n-last), 0), size)
			last, lastAt = n, now
			want := burst
			if balance <= 0 {
				want = baseline
			}
			if want != limit {
				limit = want
				if err := os.WriteFile(rule, []byte(fmt.Sprintf("%s %g", numbers, limit)), 0o644); err != nil {
					t.Errorf("setting the throttle to %g: %v", limit, err)
				}
			}
			c.log = append(c.log, controllerEntry{now.Sub(c.start), balance, limit})
		}
	}()
	return c
}

// TestDeviceCeilingAtTheDefaultProbeRate is the write IOPS cap with the probes at their
// default intervals and ops: how long recognition takes in a default deployment. Minutes
// long, so only with DISKPROBE_CEILING_DEFAULT_RATE=1.
func TestDeviceCeilingAtTheDefaultProbeRate(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	if os.Getenv("DISKPROBE_CEILING_DEFAULT_RATE") == "" {
		t.Skip("minutes long: set DISKPROBE_CEILING_DEFAULT_RATE=1")
	}
	testCap(t, "", "blkio.throttle.write_iops_device", 100,
		[]string{"--rw=randwrite", "--bs=4k", "--size=8m", "--ioengine=libaio", "--iodepth=4", "--direct=1"},
		func(s ceilingSample) float64 { return s.iops["write"] }, "write IOPS")
}
