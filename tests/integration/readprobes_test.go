package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// readSamples is what the read probes of a target have produced so far.
func readSamples(f families, target string) (randreads, seqBytes float64) {
	return metric(f, "diskprobe_read_duration_seconds", "target", target),
		metric(f, "diskprobe_sequential_bytes_total", "target", target, "direction", "read")
}

// waitReadSamples waits until both read probes of target have gone beyond the given
// counts: randread samples in the histogram and seqread bytes in the counter.
func waitReadSamples(t *testing.T, e *framework.Exporter, target string, reads, bytes float64) families {
	t.Helper()
	return framework.WaitMetric(t, e, 30*time.Second, fmt.Sprintf("%s: > %v randread samples and > %v seqread bytes", target, reads, bytes), func(f families) bool {
		r, b := readSamples(f, target)
		return r > reads && b > bytes
	})
}

func noErrors(t *testing.T, f families, target string, probes ...string) {
	t.Helper()
	for _, p := range probes {
		if n := metric(f, "diskprobe_probe_errors_total", "target", target, "probe", p); n != 0 {
			t.Errorf("%s %s: %v errors", target, p, n)
		}
		if n := metric(f, "diskprobe_probe_runs_total", "target", target, "probe", p); n == 0 {
			t.Errorf("%s %s: no rounds run", target, p)
		}
	}
}

func TestReadProbesNeverWriteToARawDevice(t *testing.T) {
	dev := testenv.LoopDevice(t, 64*mib)
	testenv.FillRandom(t, dev, 64*mib)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {interval: 1s, ops: 20}
    seqread:  {interval: 1s, bytes: 8MiB}
`, dev))
	before := stats(t, dev)

	e := framework.StartExporter(t, cfg)
	f := waitReadSamples(t, e, "raw", 0, 0)
	r0, b0 := readSamples(f, "raw")
	f = waitReadSamples(t, e, "raw", r0+40, b0+16*mib)
	after := stats(t, dev)

	noErrors(t, f, "raw", "randread", "seqread")
	if after.WriteIOs != before.WriteIOs || after.WriteSectors != before.WriteSectors {
		t.Errorf("the exporter wrote to the block device it only reads: /proc/diskstats writes %d → %d, sectors written %d → %d",
			before.WriteIOs, after.WriteIOs, before.WriteSectors, after.WriteSectors)
	}
	r, b := readSamples(f, "raw")
	if got, want := after.ReadIOs-before.ReadIOs, uint64(r+b/mib); got < want {
		t.Errorf("/proc/diskstats counted %d reads on %s, fewer than the %v the probes report: reads are not reaching the device", got, dev, want)
	}
}

func TestReadProbesRunOnADirectoryTarget(t *testing.T) {
	_, dir := testenv.LoopExt4(t, 128*mib)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: dir
    path: %s
    randread: {interval: 1s, ops: 20, file_size: 16MiB}
    seqread:  {interval: 1s, bytes: 8MiB}
    limits:   {min_free: 1MiB}
`, dir))
	e := framework.StartExporter(t, cfg)
	waitLog(t, e, 30*time.Second, "read probe file prepared")
	f := waitReadSamples(t, e, "dir", 0, 0)
	r0, b0 := readSamples(f, "dir")
	f = waitReadSamples(t, e, "dir", r0+40, b0+16*mib)
	noErrors(t, f, "dir", "randread", "seqread")
	if n := metric(f, "diskprobe_sequential_throughput_bytes_per_second", "target", "dir", "direction", "read"); n <= 0 {
		t.Errorf("seqread throughput gauge is %v after rounds ran", n)
	}
}

func TestPreparedReadFileHasNoHolesAndIsReusedAfterRestart(t *testing.T) {
	_, dir := testenv.LoopExt4(t, 128*mib)
	// SEEK_HOLE must be able to see a fallocated, never written extent on this
	// filesystem, or "no holes" below would prove nothing.
	control := filepath.Join(dir, "fallocated")
	testenv.Run(t, "fallocate", "-l", "1MiB", control)
	if hole, size := testenv.FirstHole(t, control); hole != 0 || size != mib {
		t.Fatalf("SEEK_HOLE on a fallocated file found its first hole at %d of %d; want 0: it cannot detect unwritten extents here", hole, size)
	}

	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: dir
    path: %s
    randread: {interval: 1s, ops: 10, file_size: 16MiB}
    limits:   {min_free: 1MiB}
`, dir))
	file := filepath.Join(dir, probe.DirName, "read.probe")

	e := framework.StartExporter(t, cfg)
	waitLog(t, e, 30*time.Second, "read probe file prepared")
	f := framework.WaitMetric(t, e, 15*time.Second, "randread samples", func(f families) bool {
		return metric(f, "diskprobe_read_duration_seconds", "target", "dir") > 0
	})
	if hole, size := testenv.FirstHole(t, file); size != probe.HeaderSize+16*mib || hole != size {
		t.Errorf("prepared %s: size %d (want %d), first hole at %d: reads there would not touch the disk", file, size, probe.HeaderSize+16*mib, hole)
	}
	noErrors(t, f, "dir", "randread")
	stopExporter(t, e)
	st1, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}

	e = framework.StartExporter(t, cfg)
	waitLog(t, e, 30*time.Second, "reusing the prepared read probe file")
	framework.WaitMetric(t, e, 15*time.Second, "randread samples after the restart", func(f families) bool {
		return metric(f, "diskprobe_read_duration_seconds", "target", "dir") > 0
	})
	st2, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("read probe file rewritten on restart: mtime %v → %v", st1.ModTime(), st2.ModTime())
	}
	if log := e.Log.String(); strings.Contains(log, "preparing the read probe file") || strings.Contains(log, "read probe file prepared") {
		t.Errorf("the restarted exporter prepared the file again:\n%s", log)
	}
}

// TestDeviceContextSeesOtherReadersOnly runs the read probes on a raw loop device: with
// nobody else on the device, busy ratio and other IOPS must stay near zero (the prober's
// own reads are left out); while a dd of ours reads the device, both must rise.
func TestDeviceContextSeesOtherReadersOnly(t *testing.T) {
	testenv.RequireTools(t, "dd")
	dev := testenv.LoopDevice(t, 64*mib)
	testenv.FillRandom(t, dev, 64*mib)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {interval: 1s, ops: 50}
`, dev))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "device context", func(f families) bool {
		return hasMetric(f, "diskprobe_device_other_iops", "target", "raw")
	})

	idleIOPS, idleBusy := sampleDeviceContext(t, e, "raw", 5)
	t.Logf("only the prober on %s: other_iops %v, busy_ratio %v", dev, idleIOPS, idleBusy)
	for i := range idleIOPS {
		if idleIOPS[i] > 1 || idleBusy[i] > 0.05 {
			t.Errorf("nothing but the prober reads %s, yet device context says other_iops %.1f, busy_ratio %.3f: the prober's own I/O is counted as others'",
				dev, idleIOPS[i], idleBusy[i])
		}
	}

	stopDD := readContinuously(t, dev)
	busyIOPS, busyBusy := sampleDeviceContext(t, e, "raw", 4)
	ddReads := stopDD()
	t.Logf("while dd read %s (%d reads): other_iops %v, busy_ratio %v", dev, ddReads, busyIOPS, busyBusy)
	if ddReads < 1000 {
		t.Fatalf("dd read only %d blocks of %s: the comparison means nothing", ddReads, dev)
	}
	if m := maxOf(busyIOPS); m < 100 {
		t.Errorf("a dd doing thousands of reads per second on %s shows as other_iops %v (max %.1f)", dev, busyIOPS, m)
	}
	if m := maxOf(busyBusy); m < 0.2 {
		t.Errorf("a dd reading %s back to back shows as busy_ratio %v (max %.3f)", dev, busyBusy, m)
	}
}

// sampleDeviceContext collects n fresh values of the device context gauges of target:
// a value is taken each time a new round changed either gauge, or after 1.5 s.
func sampleDeviceContext(t *testing.T, e *framework.Exporter, target string, n int) (iops, busy []float64) {
	t.Helper()
	runs := func(f families) float64 { return metric(f, "diskprobe_probe_runs_total", "target", target) }
	last := runs(e.MustScrape())
	for len(iops) < n {
		f := framework.WaitMetric(t, e, 10*time.Second, "a new round", func(f families) bool { return runs(f) > last })
		last = runs(f)
		iops = append(iops, metric(f, "diskprobe_device_other_iops", "target", target))
		busy = append(busy, metric(f, "diskprobe_device_busy_ratio", "target", target))
	}
	return iops, busy
}

// readContinuously runs `dd if=dev of=/dev/null iflag=direct bs=4k` over and over until
// the returned function is called; that function returns the blocks dd read.
func readContinuously(t *testing.T, dev string) func() int {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		total := 0
		for {
			select {
			case <-stop:
				done <- total
				return
			default:
			}
			cmd := exec.Command("dd", "if="+dev, "of=/dev/null", "iflag=direct", "bs=4k", "count=4096")
			if out, err := cmd.CombinedOutput(); err == nil {
				var in, part int
				if _, err := fmt.Sscanf(string(out), "%d+%d records in", &in, &part); err != nil {
					t.Errorf("dd said %q: %v", out, err)
				}
				total += in
			}
		}
	}()
	var result int
	var once bool
	stopFn := func() int {
		if !once {
			once = true
			close(stop)
			result = <-done
		}
		return result
	}
	t.Cleanup(func() { stopFn() })
	return stopFn
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// TestDeviceContextLeavesOutTheProbersOwnWrites runs the write probe and the read probes
// of two targets on one ext4: none of that I/O is "others'".
func TestDeviceContextLeavesOutTheProbersOwnWrites(t *testing.T) {
	_, dir := testenv.LoopExt4(t, 128*mib)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: a
    path: %s/a
    fsync:    {interval: 1s, ops: 10, file_size: 16MiB}
    randread: {interval: 1s, ops: 10, file_size: 8MiB}
    limits:   {min_free: 1MiB}
  - name: b
    path: %s/b
    fsync:    {interval: 1s, ops: 10, file_size: 16MiB}
    limits:   {min_free: 1MiB}
`, dir, dir))
	e := framework.StartExporter(t, cfg)
	waitLog(t, e, 30*time.Second, "read probe file prepared")
	for _, target := range []string{"a", "b"} {
		iops, busy := sampleDeviceContext(t, e, target, 6)
		t.Logf("%s: other_iops %v, busy_ratio %v", target, iops, busy)
		// Each target does ~40 I/Os a second here (fdatasync commits, reads); a few of
		// ext4's own metadata writebacks of the probe files may land between rounds.
		if m := mean(iops); m > 5 {
			t.Errorf("target %s: other_iops averages %.1f (%v) with only the prober on the disk: the other target's probe I/O counts as others'", target, m, iops)
		}
		if m := mean(busy); m > 0.05 {
			t.Errorf("target %s: busy_ratio averages %.3f (%v) with only the prober on the disk", target, m, busy)
		}
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
