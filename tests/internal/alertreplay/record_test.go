package alertreplay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"golang.org/x/sys/unix"
)

// recordRounds rounds of the default 20 operations make one recording: 1200 fdatasyncs,
// enough for a p99 twelve operations deep. Rounds are a second apart, not 15 s: blkio
// throttling works in slices of 100 ms, so a one-second pause already gives every round
// the fresh budget a 15 s pause would, and a recording takes minutes, not hours.
const (
	recordRounds = 60
	recordPause  = time.Second
)

// recording is one data file of testdata/: where the probe ran and what disturbed it.
type recording struct {
	file  string
	setup string // for the file's header
	run   func(t *testing.T) (dir string, during func(ctx context.Context))
}

var recordings = []recording{
	{"host.lat", "this machine's own disk, a directory under /var/tmp", func(t *testing.T) (string, func(context.Context)) {
		dir, err := os.MkdirTemp("/var/tmp", "diskprobe-record-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir, nil
	}},
	{"loop-20iops.lat", "ext4 on a loop device (image on this machine's disk), writes throttled to 20 IOPS by a blkio cgroup", throttled(20)},
	{"loop-50iops.lat", "ext4 on a loop device, writes throttled to 50 IOPS", throttled(50)},
	{"loop-100iops.lat", "ext4 on a loop device, writes throttled to 100 IOPS", throttled(100)},
	{"loop-100iops-competing.lat", "ext4 on a loop device throttled to 100 IOPS, shared with fio writing 4 KiB blocks at random with O_DIRECT, queue depth 1, in the same cgroup", func(t *testing.T) (string, func(context.Context)) {
		dev, dir := testenv.LoopExt4(t, 1<<30)
		cg := testenv.ThrottleWrites(t, dev, 100)
		cg.Add(os.Getpid())
		testenv.RequireTools(t, "fio")
		fio := exec.Command("fio", "--name=competitor", "--directory="+dir, "--rw=randwrite", "--bs=4k",
			"--ioengine=psync", "--direct=1", "--size=128M", "--time_based", "--runtime=3600", "--output=/dev/null")
		if err := fio.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fio.Process.Kill(); fio.Wait() })
		cg.Add(fio.Process.Pid)
		time.Sleep(5 * time.Second) // fio lays out its file before it competes
		return dir, nil
	}},
	{"loop-stalls.lat", "ext4 on an unthrottled loop device; every 2–8 s (uniform) its writes are held for 0.2–2 s (log-uniform) by switching a blkio cgroup limit of 1 write IOPS on and off: a device that stops answering for a moment (firmware GC, a path failover)", func(t *testing.T) (string, func(context.Context)) {
		dev, dir := testenv.LoopExt4(t, 1<<30)
		cg := testenv.ThrottleWrites(t, dev, 1_000_000)
		cg.Add(os.Getpid())
		var st unix.Stat_t
		if err := unix.Stat(dev, &st); err != nil {
			t.Fatal(err)
		}
		limit := func(iops int) {
			rule := fmt.Sprintf("%d:%d %d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), iops)
			if err := os.WriteFile(filepath.Join(cg.Path, "blkio.throttle.write_iops_device"), []byte(rule), 0o644); err != nil {
				t.Errorf("setting the stall limit: %v", err)
			}
		}
		return dir, func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration((2 + 6*rand.Float64()) * float64(time.Second))):
				}
				limit(1)
				time.Sleep(time.Duration(float64(time.Second) * LogUniform{0.2, 2}.Sample(rand.New(rand.NewPCG(rand.Uint64(), 0)))))
				limit(1_000_000)
			}
		}
	}},
}

func throttled(iops int) func(t *testing.T) (string, func(context.Context)) {
	return func(t *testing.T) (string, func(context.Context)) {
		dev, dir := testenv.LoopExt4(t, 1<<30)
		testenv.ThrottleWrites(t, dev, iops).Add(os.Getpid())
		return dir, nil
	}
}

// TestRecordDistributions rewrites testdata/*.lat: the fdatasync latency of every
// operation of the exporter's own fsync probe (defaults: 20 operations of 2300 bytes a
// round) on this machine's disk and on throttled, shared and stalling loop devices.
// Root; about ten minutes. DISKPROBE_RECORD=1 go -C tests test ./internal/alertreplay -run TestRecordDistributions -v
func TestRecordDistributions(t *testing.T) {
	if os.Getenv("DISKPROBE_RECORD") == "" {
		t.Skip("set DISKPROBE_RECORD=1 (root) to re-record testdata/*.lat")
	}
	testenv.RequireRoot(t)
	for _, rec := range recordings {
		t.Run(rec.file, func(t *testing.T) {
			dir, during := rec.run(t)
			lat := recordFsync(t, dir, during)
			writeRecording(t, filepath.Join("testdata", rec.file), rec.setup, lat)
		})
	}
}

// recordFsync runs recordRounds rounds of the fsync probe with its default options in dir
// while during (if any) disturbs the device, and returns every fdatasync's latency.
func recordFsync(t *testing.T, dir string, during func(ctx context.Context)) []time.Duration {
	def := config.Default(config.ProbeFsync)
	p, err := probe.NewFsync(probe.FsyncOptions{Dir: dir, Ops: def.Ops, BlockSize: int(def.BlockSize), FileSize: int64(def.FileSize)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(); p.Remove() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); during(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	var lat []time.Duration
	env := &probe.Env{Budget: probe.Unlimited, Observe: func(s probe.Sample) {
		if s.Phase == probe.PhaseFdatasync {
			lat = append(lat, s.Duration)
		}
	}}
	for range recordRounds {
		if _, err := p.Round(ctx, env); err != nil {
			t.Fatal(err)
		}
		time.Sleep(recordPause)
	}
	return lat
}

func writeRecording(t *testing.T, path, setup string, lat []time.Duration) {
	var b strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "# fdatasync latency of each operation of diskprobe's fsync probe, in microseconds.\n")
	fmt.Fprintf(&b, "# setup: %s.\n", setup)
	fmt.Fprintf(&b, "# probe: defaults (%d ops of %d B a round), %d rounds %s apart.\n", config.Default(config.ProbeFsync).Ops, config.Default(config.ProbeFsync).BlockSize, recordRounds, recordPause)
	fmt.Fprintf(&b, "# recorded: %s, kernel %s, %d CPUs, shared with other work.\n", time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(kernel)), runtime.NumCPU())
	fmt.Fprintf(&b, "# regenerate (root): DISKPROBE_RECORD=1 go -C tests test ./internal/alertreplay -run 'TestRecordDistributions/%s' -v\n", filepath.Base(path))
	for _, d := range lat {
		fmt.Fprintf(&b, "%.1f\n", float64(d)/1e3)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadEmpirical(path); err != nil {
		t.Fatal(err)
	}
	s := check.Summarize(lat)
	t.Logf("%s: %d ops, p50 %v p90 %v p99 %v max %v", path, s.Count, s.P50, s.P90, s.P99, s.Max)
}
