package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// The hot paths: one operation per iteration through the probe package, exactly as the
// daemon's worker calls it (benchkit.Round with the Unlimited budget standing in for a budget that
// has tokens), each sample observed into a histogram built like the daemon's. Run with
// -benchmem: allocs/op must be 0.

// benchDir is a directory on a disk-backed filesystem (O_DIRECT; b.TempDir may be tmpfs).
func benchDir(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv("DISKPROBE_BENCH_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "diskprobe-bench-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := probe.CheckDirectIO(dir); err != nil {
		tb.Skipf("%v (set DISKPROBE_BENCH_DIR to a directory on a disk)", err)
	}
	return dir
}

// latencyVec is the daemon's histogram vector (collector.LatencyVec), one child per target.
func latencyVec() *collector.LatencyVec {
	return collector.NewLatencyVec("bench_duration_seconds", "Latency of the benchmarked operation.", collector.LatencyBuckets)
}

func observeInto(h interface{ Observe(float64) }) *probe.Env {
	return &probe.Env{Budget: probe.Unlimited, Inflight: &probe.Inflight{},
		Observe: func(s probe.Sample) { h.Observe(s.Duration.Seconds()) }}
}

func newFsync(tb testing.TB, dir string) *probe.Fsync {
	p, err := probe.NewFsync(probe.FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: 64 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Remove() })
	return p
}

func newRandread(tb testing.TB, dir string, size int64) *probe.Randread {
	src, err := probe.NewReadFile(dir, size, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { src.Remove() })
	if err := benchkit.Prepare(context.Background(), src); err != nil {
		tb.Fatal(err)
	}
	p, err := probe.NewRandread(src, 1, 4096)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkFsyncWriteFdatasync is one 2300-byte write + fdatasync per iteration.
func BenchmarkFsyncWriteFdatasync(b *testing.B) {
	p := newFsync(b, benchDir(b))
	env := observeInto(latencyVec().WithLabelValues("t"))
	ctx := context.Background()
	if _, err := p.Round(ctx, env); err != nil { // creates the file
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Round(ctx, env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRandread4KiB is one 4 KiB O_DIRECT pread per iteration.
func BenchmarkRandread4KiB(b *testing.B) {
	p := newRandread(b, benchDir(b), 16<<20)
	env := observeInto(latencyVec().WithLabelValues("t"))
	ctx := context.Background()
	if _, err := p.Round(ctx, env); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Round(ctx, env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTargetsInParallel runs 8 targets at once, as the daemon's per-target workers
// do: half fsync, half randread, each with its own probe state and its own child of one
// shared histogram vector. mutex-wait-ns/op is the time goroutines spent blocked on a
// sync.Mutex or RWMutex per operation (the mutex profile at rate 1): 0 means the targets
// never wait for each other. all-lock-wait-ns/op adds the runtime's internal locks
// (runtime/metrics /sync/mutex/wait/total:seconds): the scheduler's, the garbage
// collector's and the heap's, which any busy Go program meets. The with-scrapes variant gathers the registry every
// 10 ms meanwhile, as a scrape does (its own allocations count in allocs/op there).
func BenchmarkTargetsInParallel(b *testing.B) {
	for _, scrapes := range []bool{false, true} {
		name := "targets=8"
		if scrapes {
			name += "/with-scrapes"
		}
		b.Run(name, func(b *testing.B) { benchmarkTargets(b, 8, scrapes) })
	}
}

func benchmarkTargets(b *testing.B, n int, scrapes bool) {
	dir := benchDir(b)
	vec := latencyVec()
	reg := prometheus.NewRegistry()
	reg.MustRegister(vec)
	ctx := context.Background()
	type target struct {
		p   probe.Prober
		env *probe.Env
	}
	targets := make([]target, n)
	for i := range targets {
		tdir := fmt.Sprintf("%s/t%d", dir, i)
		if err := os.Mkdir(tdir, 0o755); err != nil {
			b.Fatal(err)
		}
		var p probe.Prober
		if i%2 == 0 {
			p = newFsync(b, tdir)
		} else {
			p = newRandread(b, tdir, 4<<20)
		}
		targets[i] = target{p, observeInto(vec.WithLabelValues(fmt.Sprint(i)))}
		if _, err := p.Round(ctx, targets[i].env); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	gathered := make(chan struct{})
	if scrapes {
		go func() {
			defer close(gathered)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					_, _ = reg.Gather() // load on the scrape path; what it returns is not the point
				}
			}
		}()
	} else {
		close(gathered)
	}
	var next atomic.Int32
	b.SetParallelism((n + 1) / 2) // GOMAXPROCS × this = goroutines; one target each on 2 CPUs
	b.ReportAllocs()
	prev := runtime.SetMutexProfileFraction(1)
	defer runtime.SetMutexProfileFraction(prev)
	wait0, user0 := mutexWait(), userLockWait()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		t := targets[int(next.Add(1)-1)%n]
		for pb.Next() {
			if _, err := t.p.Round(ctx, t.env); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	wait, user := mutexWait()-wait0, userLockWait()-user0
	close(stop)
	<-gathered
	b.ReportMetric(float64(user.Nanoseconds())/float64(b.N), "mutex-wait-ns/op")
	b.ReportMetric(float64(wait.Nanoseconds())/float64(b.N), "all-lock-wait-ns/op")
}

// userLockWait is the cumulative contention the mutex profile recorded on sync.Mutex and
// sync.RWMutex (their Unlock is in the stack), leaving out the runtime's internal locks
// (runtime.unlock: the scheduler, the garbage collector, the heap).
func userLockWait() time.Duration {
	var buf bytes.Buffer
	if err := pprof.Lookup("mutex").WriteTo(&buf, 1); err != nil {
		return 0
	}
	lines := strings.Split(buf.String(), "\n")
	var perSecond, cycles float64
	for i, line := range lines {
		if v, ok := strings.CutPrefix(line, "cycles/second="); ok {
			perSecond, _ = strconv.ParseFloat(v, 64)
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "@" {
			continue
		}
		userLock := false
		for _, frame := range lines[i+1:] {
			if !strings.HasPrefix(frame, "#") {
				break
			}
			userLock = userLock || strings.Contains(frame, "sync.(*Mutex).") || strings.Contains(frame, "sync.(*RWMutex).")
		}
		if c, err := strconv.ParseFloat(f[0], 64); err == nil && userLock {
			cycles += c
		}
	}
	if perSecond == 0 {
		return 0
	}
	return time.Duration(cycles / perSecond * 1e9)
}

// mutexWait is the cumulative time goroutines have spent blocked on locks.
func mutexWait() time.Duration {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * 1e9)
}
