package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSchedstatParserAcceptsOnlyThreeFieldsAndANewline(t *testing.T) {
	onCPU, delay, err := parseSchedstat([]byte("6769734 18022565 5\n"))
	if err != nil || onCPU != 6769734 || delay != 18022565 {
		t.Fatalf("parse: %v %v %v; want 6769734ns on a CPU, 18022565ns waiting", onCPU, delay, err)
	}
	if _, delay, err := parseSchedstat([]byte("1 0 1\n")); err != nil || delay != 0 {
		t.Errorf("a thread that never waited: %v %v", delay, err)
	}
	// A thread created moments ago has been put on a CPU once, and its time there is
	// not counted until its first tick: measured, not "statistics off".
	if onCPU, delay, err := parseSchedstat([]byte("0 4912 1\n")); err != nil || onCPU != 0 || delay != 4912 {
		t.Errorf("a thread that has just started: %v %v %v; want 4912ns waiting", onCPU, delay, err)
	}
	for _, in := range []string{
		"", "\n", "1 2\n", "1 2 3", "1 2 3 4\n", "1 2 3\n\n", "1 2 3\nx", " 1 2 3\n", "1  2 3\n",
		"1 2 3 \n", "1\t2\t3\n", "-1 2 3\n", "1 -2 3\n", "1 2 x\n", "1 2.5 3\n", "1 0x2 3\n",
		"1 99999999999999999999 3\n", "1 9223372036854775808 3\n", "a b c\n", "1 2 3\x00",
	} {
		if _, _, err := parseSchedstat([]byte(in)); !errors.Is(err, errSchedstatFormat) {
			t.Errorf("parse(%q) = %v, want a format error", in, err)
		}
	}
	// A kernel with scheduler statistics off at run time writes "0 0 0" for every
	// thread: not "never waited" but "not measured".
	if _, _, err := parseSchedstat([]byte("0 0 0\n")); !errors.Is(err, errNoSchedInfo) {
		t.Errorf(`parse("0 0 0") = %v, want errNoSchedInfo`, err)
	}
}

func TestCPUWaitIsMeasuredOnThisKernel(t *testing.T) {
	if err := CheckCPUWait(); err != nil {
		t.Skip(err)
	}
	p, err := NewFsync(FsyncOptions{Dir: t.TempDir(), Ops: 20, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Round(context.Background(), (&collected{}).env())
	if err != nil {
		t.Fatal(err)
	}
	if !res.CPUWaitKnown || res.CPUWait < 0 {
		t.Errorf("CPU wait %v known %v; want it measured", res.CPUWait, res.CPUWaitKnown)
	}
}

// withSchedstat points the probes at another schedstat file for the test.
func withSchedstat(t *testing.T, path string) {
	old := schedstatPath
	schedstatPath = path
	t.Cleanup(func() { schedstatPath = old })
}

func TestMissingOrStrangeSchedstatLeavesCPUWaitUnknownNotAProbeError(t *testing.T) {
	strange := filepath.Join(t.TempDir(), "schedstat")
	if err := os.WriteFile(strange, []byte("1 2 3 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"absent (old kernel, CONFIG_SCHED_INFO off, gVisor)": filepath.Join(t.TempDir(), "none"),
		"in a format the parser does not know":               strange,
	} {
		t.Run(name, func(t *testing.T) {
			withSchedstat(t, path)
			p, err := NewFsync(FsyncOptions{Dir: t.TempDir(), Ops: 3, BlockSize: 2300, FileSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for range 2 {
				var c collected
				res, err := p.Round(context.Background(), c.env())
				if err != nil || res.Ops != 3 || c.sync != 3 {
					t.Fatalf("round: %+v %v; want 3 operations observed and no error", res, err)
				}
				if res.CPUWaitKnown || res.CPUWait != 0 {
					t.Errorf("CPU wait %v known %v; want unknown", res.CPUWait, res.CPUWaitKnown)
				}
			}
			if !p.round.clock.off || len(p.round.clock.fds) != 0 {
				t.Errorf("the probe would ask again every round (off %v, descriptors %v)", p.round.clock.off, p.round.clock.fds)
			}
			if CheckCPUWait() == nil {
				t.Error("CheckCPUWait saw nothing wrong")
			}
		})
	}
}

// TestRoundReadsTheSchedstatOfTheThreadThatMadeItsCalls: the daemon's worker goroutine is
// not locked to an OS thread, and a goroutine that yields (Budget.Wait, the settler) or
// comes back from a blocking call may go on on another thread. While a round measures,
// the descriptor it reads must be the current thread's, or it reads another thread's.
func TestRoundReadsTheSchedstatOfTheThreadThatMadeItsCalls(t *testing.T) {
	if err := CheckCPUWait(); err != nil {
		t.Skip(err)
	}
	// Busy goroutines on every P, so that a goroutine that yields is likely to be taken
	// up by another thread.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	p, err := NewFsync(FsyncOptions{Dir: t.TempDir(), Ops: 100, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	threads, wrong, unknown := map[int]bool{}, 0, 0
	env := &Env{Budget: Unlimited, Observe: func(Sample) {
		tid := unix.Gettid()
		threads[tid] = true
		if p.round.clock.fdTid() != tid {
			wrong++
		}
		killThread()      // so that the round comes back on threads created moments before
		runtime.Gosched() // as a Budget.Wait that sleeps would
	}}
	for range 3 {
		res, err := p.Round(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		if !res.CPUWaitKnown {
			unknown++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of 600 samples were taken on a thread whose schedstat was not the one read (threads %v)", wrong, threads)
	}
	// A round that came back on a new thread must not read that thread's schedstat as
	// "the kernel keeps no statistics" and stop measuring for the probe's life.
	if p.round.clock.off || unknown == 3 {
		t.Errorf("CPU wait unknown in %d of 3 rounds, measuring given up: %v", unknown, p.round.clock.off)
	}
}

// killThread ends one OS thread of the process: a goroutine that exits while locked to
// its thread takes the thread with it, and the Go runtime later starts a new one.
func killThread() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
	}()
	<-done
}

// fdTid is the thread whose schedstat fd is, -1 if none.
func (c *cpuClock) fdTid() int {
	for _, f := range c.fds {
		if f.fd == c.fd {
			return f.tid
		}
	}
	return -1
}

// BenchmarkSchedstatReadAndParse is one reading of the thread's run_delay: the pread of
// its schedstat and the parse. It must not allocate.
func BenchmarkSchedstatReadAndParse(b *testing.B) {
	if err := CheckCPUWait(); err != nil {
		b.Skip(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := openFD(schedstatPath, unix.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	var buf [64]byte
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readRunDelay(fd, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSchedstatParse is the parse alone.
func BenchmarkSchedstatParse(b *testing.B) {
	in := []byte("6769734123 18022565456 51234\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseSchedstat(in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCPUWaitKeepsMeasuringAfterTheProbeFileIsReplaced: a round that drops its file (the
// directory was recreated under it, or an fdatasync failed) must not close the clock's
// descriptors with it: the new file would get the clock's descriptor number, and the clock
// would read the probe file as its thread's schedstat.
func TestCPUWaitKeepsMeasuringAfterTheProbeFileIsReplaced(t *testing.T) {
	if err := CheckCPUWait(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	fsync, err := NewFsync(FsyncOptions{Dir: dir, Ops: 5, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer fsync.Close()
	seqwrite, err := NewSeqwrite(dir, 1<<20, 1<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer seqwrite.Close()
	for name, p := range map[string]interface {
		Round(context.Context, *Env) (Result, error)
		clock() *cpuClock
	}{"fsync": fsync, "seqwrite": seqwrite} {
		t.Run(name, func(t *testing.T) {
			for i := range 3 {
				if i > 0 { // the directory recreated between rounds
					must(t, os.RemoveAll(filepath.Join(dir, DirName)))
					must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
				}
				res, err := p.Round(context.Background(), (&collected{}).env())
				if err != nil {
					t.Fatal(err)
				}
				if c := p.clock(); !res.CPUWaitKnown || c.off {
					t.Fatalf("round %d: CPU wait known %v, measuring given up %v", i, res.CPUWaitKnown, c.off)
				}
			}
		})
	}
}

func (p *prober[K]) clock() *cpuClock { return &p.round.clock }
