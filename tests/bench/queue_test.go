package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/latency"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// queueFileSize is the file both tools read and write: 1 GiB, check's default --file-size.
const queueFileSize = 1 << 30

// TestQueueDepthAgreement runs only the queue-depth comparison of make bench
// (DISKPROBE_BENCH_QUEUE=1; root, fio) and logs its figures; with DISKPROBE_BENCH_REPORT it
// rewrites that report's queue section. DISKPROBE_BENCH_QUEUE_ROUNDS sets the rounds
// (default 5).
func TestQueueDepthAgreement(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_QUEUE") == "" {
		t.Skip("set DISKPROBE_BENCH_QUEUE=1 to run the queue-depth comparison with fio alone")
	}
	q := measureQueue(t)
	for _, row := range q.Cases {
		t.Logf("%s: %+v", row.Title, row.Rounds)
	}
	spliceReport(t, "queue", q.SpliceQueue)
}

// measureQueue compares probe.RunQueue with fio's libaio engine on one prepared file of an
// ext4 on a RAM-backed loop device (this machine's own disk is shared with other work,
// and its noise would swamp a ±15 % goal), then times full sweeps of a RAM-backed loop
// device and of that directory against what they advertise.
func measureQueue(t *testing.T) *benchkit.Queue {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	rounds := envInt(t, "DISKPROBE_BENCH_QUEUE_ROUNDS", 5)
	const runFor = 3 * time.Second
	q := &benchkit.Queue{Date: time.Now(),
		Command: "DISKPROBE_BENCH_QUEUE=1 DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestQueueDepthAgreement$' -count=1 -v -timeout 30m (root)",
		Backing: "Both on ext4 on a loop device (`--direct-io=on`) whose image is in /dev/shm: RAM behind a real block layer, " +
			"so the figures are this machine's CPU and memory, not its shared virtio disk."}
	_, dir := testenv.RAMLoopExt4(t, 3<<30)
	src, err := probe.NewReadFile(dir, queueFileSize, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := benchkit.Prepare(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Remove() })
	fioTarget := []string{"--filename=" + src.Path(), fmt.Sprintf("--offset=%d", probe.HeaderSize), fmt.Sprintf("--size=%d", queueFileSize),
		"--direct=1", "--ioengine=libaio", "--time_based", fmt.Sprintf("--runtime=%ds", int(runFor.Seconds())), "--lat_percentiles=1"}
	unpin := pinLoopWorkers(t, queueCPU)
	q.Pinned = fmt.Sprintf("Each tool's I/O thread (fio `--cpus_allowed=%d`; ours locked to its OS thread, that thread's affinity set) "+
		"and the loop device's workers (the kernel's unbound workqueues, /sys/devices/virtual/workqueue/cpumask) run on CPU %d. "+
		"A 4 KiB read of this device takes less time than waking a halted vCPU: unpinned, a run's figures depend on whether "+
		"the scheduler put the submitting thread and the loop worker on the same CPU, for fio as for ours "+
		"(the unpinned rows below, and fio's QD1 p50 of 16-64 µs across runs of one command). Pinned, both measure the I/O path.", queueCPU, queueCPU)

	cases := []struct {
		title     string
		rw        string
		bs, depth int
		random    bool
		readMix   int
		extraFio  []string
		unpinned  bool // a diagnostic: the vCPU wake-up placement, not a goal
	}{
		{title: "4 KiB random read, QD1", rw: "randread", bs: 4096, depth: 1, random: true, readMix: 100},
		{title: "4 KiB random read, QD32", rw: "randread", bs: 4096, depth: 32, random: true, readMix: 100},
		{title: "1 MiB sequential read, QD1", rw: "read", bs: 1 << 20, depth: 1, readMix: 100},
		{title: "128 KiB randrw 50/50, QD4", rw: "randrw", bs: 128 << 10, depth: 4, random: true, readMix: 50},
		{title: "128 KiB randrw 50/50, QD32", rw: "randrw", bs: 128 << 10, depth: 32, random: true, readMix: 50},
		{title: "4 KiB random read, QD1, unpinned", rw: "randread", bs: 4096, depth: 1, random: true, readMix: 100, unpinned: true},
	}
	for _, c := range cases {
		args := append([]string{"--name=" + c.rw, "--rw=" + c.rw, fmt.Sprintf("--bs=%d", c.bs), fmt.Sprintf("--iodepth=%d", c.depth)}, fioTarget...)
		cpu := queueCPU
		if c.unpinned {
			unpin()
			cpu = -1
		} else {
			args = append(args, fmt.Sprintf("--cpus_allowed=%d", cpu))
		}
		if c.random {
			args = append(args, "--norandommap")
		}
		if c.readMix < 100 {
			args = append(args, fmt.Sprintf("--rwmixread=%d", c.readMix))
		} else {
			args = append(args, "--readonly")
		}
		job := probe.QueueJob{BlockSize: c.bs, Depth: c.depth, Random: c.random, ReadMix: c.readMix, Runtime: runFor}
		qc := &benchkit.QueueCase{Title: c.title, Mixed: c.readMix < 100, Diagnostic: c.unpinned, FioCommand: "fio " + joinArgs(args),
			Ours: fmt.Sprintf("`probe.RunQueue(%+v)` on the same file (what `check --profile=%s` runs)", job, map[bool]string{true: "randrw", false: "sweep"}[c.readMix < 100])}
		for i := range rounds {
			var rd benchkit.QueueRound
			oursFirst := i%2 == 0
			if oursFirst {
				rd.Ours = oursQueue(t, src, job, cpu)
			}
			r, err := benchkit.RunFio(t.TempDir(), "", args...)
			if err != nil {
				t.Fatal(err)
			}
			rd.Fio = benchkit.QueueSide{IOPS: r.ReadIOPS + r.WriteIOPS, BytesPerSecond: r.ReadBW + r.WriteBW,
				ReadP50: benchkit.Pct(r.ReadLat, 50), WriteP50: benchkit.Pct(r.WriteLat, 50)}
			if !oursFirst {
				rd.Ours = oursQueue(t, src, job, cpu)
			}
			t.Logf("%s round %d: ours %.0f IO/s p50 %v/%v | fio %.0f IO/s p50 %v/%v", c.title, i+1,
				rd.Ours.IOPS, rd.Ours.ReadP50, rd.Ours.WriteP50, rd.Fio.IOPS, rd.Fio.ReadP50, rd.Fio.WriteP50)
			qc.Rounds = append(qc.Rounds, rd)
		}
		q.Cases = append(q.Cases, qc)
	}
	src.Remove()
	unpin()

	ramDev := ramLoopDevice(t, 1<<30)
	testenv.FillRandom(t, ramDev, 1<<30)
	q.Sweeps = append(q.Sweeps, timeSweep(t, "a RAM-backed loop device (whole device, 1 GiB)", ramDev), timeSweep(t, "a directory on ext4 on a RAM-backed loop device (1 GiB file)", dir))
	return q
}

// queueCPU is the CPU the pinned comparisons run on.
const queueCPU = 0

// oursQueue runs job as check does, its I/O thread on cpu unless cpu < 0.
func oursQueue(t *testing.T, src *probe.ReadSource, job probe.QueueJob, cpu int) benchkit.QueueSide {
	t.Helper()
	var res probe.QueueResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// RunQueue's AIO loop runs on the calling goroutine. Locked and never unlocked, its
		// thread, pinned, ends with the goroutine instead of going back to the runtime.
		runtime.LockOSThread()
		if cpu >= 0 {
			var set unix.CPUSet
			set.Set(cpu)
			if err = unix.SchedSetaffinity(0, &set); err != nil {
				return
			}
		}
		res, err = probe.RunQueue(context.Background(), src, job, &probe.Env{Budget: probe.Unlimited})
	}()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	s := benchkit.QueueSide{IOPS: float64(res.Read.Ops+res.Write.Ops) / res.Elapsed.Seconds(),
		BytesPerSecond: float64(res.Read.Bytes+res.Write.Bytes) / res.Elapsed.Seconds()}
	s.ReadP50 = latency.Percentile(latency.Sorted(res.Read.Lat), 50)
	s.WriteP50 = latency.Percentile(latency.Sorted(res.Write.Lat), 50)
	return s
}

// pinLoopWorkers puts the kernel's unbound workqueues, which run a loop device's I/O, on
// cpu until the returned function (also a cleanup) restores their CPU mask.
func pinLoopWorkers(t *testing.T, cpu int) (restore func()) {
	t.Helper()
	const mask = "/sys/devices/virtual/workqueue/cpumask"
	old, err := os.ReadFile(mask)
	if err != nil {
		t.Skipf("cannot pin the loop device's workers: %v", err)
	}
	if err := os.WriteFile(mask, []byte(fmt.Sprintf("%x\n", 1<<cpu)), 0); err != nil {
		t.Skipf("cannot pin the loop device's workers: %v", err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := os.WriteFile(mask, old, 0); err != nil {
				t.Errorf("restoring %s to %s: %v", mask, strings.TrimSpace(string(old)), err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

// ramLoopDevice is a loop device on an image in /dev/shm, detached in cleanup.
func ramLoopDevice(t *testing.T, size int64) string {
	t.Helper()
	shm, err := os.MkdirTemp("/dev/shm", "diskprobe-bench-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	img := shm + "/disk.img"
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev := testenv.Run(t, "losetup", "--find", "--show", "--direct-io=on", img)
	t.Cleanup(func() {
		for range 20 {
			if exec.Command("losetup", "-d", dev).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not detach %s", dev)
	})
	return dev
}

// timeSweep runs the real `check --profile=sweep` with its defaults on path.
func timeSweep(t *testing.T, where, path string) *benchkit.SweepTiming {
	t.Helper()
	args := []string{"check", "--profile=sweep", "--json", "--no-progress", path}
	bin := testenv.Binary(t) // built before the clock starts
	start := time.Now()
	out, err := exec.Command(bin, args...).Output()
	wall := time.Since(start)
	if err != nil {
		t.Fatalf("diskprobe_exporter %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var doc struct {
		Advertised float64           `json:"advertised_seconds"`
		Duration   float64           `json:"duration_seconds"`
		Cells      []json.RawMessage `json:"cells"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	s := &benchkit.SweepTiming{Where: where, Command: "diskprobe_exporter " + strings.Join(args, " "), Cells: len(doc.Cells),
		Advertised: time.Duration(doc.Advertised * float64(time.Second)), CellsTime: time.Duration(doc.Duration * float64(time.Second)), Wall: wall}
	t.Logf("sweep of %s: %d cells in %v, advertised %v, command %v", where, s.Cells, s.CellsTime, s.Advertised, s.Wall)
	return s
}
