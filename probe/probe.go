// Package probe does the disk I/O of diskprobe_exporter: it prepares probe files, issues
// the reads, writes and fdatasyncs, and times each system call. It knows nothing of
// Prometheus, so the one-shot `check` command and the benchmarks run exactly the code the
// daemon runs.
package probe

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Phase is which system call a Sample timed.
type Phase uint8

// The timed system calls.
const (
	PhaseWrite     Phase = iota // write(2) of the fsync probe, before its fdatasync
	PhaseFdatasync              // fdatasync(2) of the fsync probe
	PhaseRead                   // one pread(2) of the randread probe
)

// Sample is one timed system call.
type Sample struct {
	Phase    Phase
	Duration time.Duration
}

// Result sums up one round.
type Result struct {
	Ops   int           // operations done (a write with its fdatasync is one)
	Bytes int64         // bytes read or written
	IO    time.Duration // time spent inside the timed system calls
	// CPUWait is how long the OS thread that made the timed calls spent runnable but
	// waiting for a CPU across them: its schedstat run_delay, read outside the timed
	// regions, just before the first of a run of back-to-back operations and just after
	// the last (see cpuClock). Only when CPUWaitKnown: the kernel reports it and every
	// reading of the round succeeded.
	CPUWait      time.Duration
	CPUWaitKnown bool
}

// Budget is the target's rate limit: an operation waits here before it touches the disk.
type Budget interface {
	// Wait blocks until one operation moving n bytes may start, or ctx ends.
	Wait(ctx context.Context, bytes int) error
}

// Unlimited is the budget of the one-shot check and of benchmarks: operations run back to back.
var Unlimited Budget = unlimited{}

type unlimited struct{}

func (unlimited) Wait(ctx context.Context, _ int) error { return ctx.Err() }

// Free says an operation may start now: it never waits.
func (unlimited) Free(int) bool { return true }

// Inflight holds the start of the outstanding system call, so that the age of an
// operation stuck in the kernel can be reported while it is stuck. The start is kept on
// the monotonic clock: a wall clock stepped while an operation is outstanding (NTP
// correcting a drifted host, date -s) must neither age it by the step, which fires
// DiskprobeProbeStuck on a healthy disk, nor make it young again.
type Inflight struct {
	start atomic.Int64 // inflightEpoch to the start, plus 1 so that 0 is idle
}

// inflightEpoch is the origin of Inflight's starts. Sub between two readings of
// time.Now uses their monotonic readings, and only those, so an offset from it is immune
// to wall clock steps; it costs a subtraction, as UnixNano did.
var inflightEpoch = time.Now()

// begin marks t, a reading of time.Now, as the start of the outstanding operation.
func (i *Inflight) begin(t time.Time) {
	if i != nil {
		i.start.Store(int64(t.Sub(inflightEpoch)) + 1)
	}
}

func (i *Inflight) end() {
	if i != nil {
		i.start.Store(0)
	}
}

// Do runs fn as the outstanding operation. It is for the file system calls made before a
// probe's own timed ones, such as creating <path>/.diskprobe: on a hung file system they
// hang the same way and must show the same age.
func (i *Inflight) Do(fn func()) {
	i.begin(time.Now())
	defer i.end()
	fn()
}

// Age is how long the outstanding operation has been running at now, a reading of
// time.Now; 0 when idle.
func (i *Inflight) Age(now time.Time) time.Duration {
	s := i.start.Load()
	if s == 0 {
		return 0
	}
	return now.Sub(inflightEpoch) - time.Duration(s-1)
}

// Env is what a round needs from the scheduler.
type Env struct {
	Budget   Budget
	Inflight *Inflight    // may be nil
	Observe  func(Sample) // called once per timed system call; may be nil
	// Notice is told what the probe does differently on this filesystem (no fallocate);
	// may be nil. The daemon logs each distinct notice once per target.
	Notice func(string)
}

func (e *Env) notice(msg string) {
	if e.Notice != nil {
		e.Notice(msg)
	}
}

func (e *Env) observe(s Sample) {
	if e.Observe != nil {
		e.Observe(s)
	}
}

// Prober runs rounds of one probe kind on one target.
type Prober interface {
	// Round runs one round of operations. It returns ErrNotPrepared until the probe's
	// file is ready, and ErrLowFreeSpace when a write would eat into the free-space floor.
	Round(ctx context.Context, env *Env) (Result, error)
	// Close releases files and buffers; it removes nothing from disk.
	Close() error
}

var (
	// ErrNotPrepared means the probe file is still being prepared; the round is skipped.
	ErrNotPrepared = errors.New("probe file is still being prepared")
	// ErrLowFreeSpace means free space is under limits.min_free; write probes stop.
	ErrLowFreeSpace = errors.New("free space is under limits.min_free")
)

// settler passes a prober through the Go scheduler before a timed system call, outside
// the timing region, when it has not passed through it for settleEvery. The runtime's
// sysmon takes the P from a goroutine blocked in a system call once that P has scheduled
// nothing for 10 ms. A probe loop never blocks in Go between back-to-back operations (a
// round within the budget's burst, a benchmark), so after its first 10 ms every system
// call longer than sysmon's tick lost its P and, on the way out, had to take one back
// and wake the sleeping sysmon, which then preempted the prober: 10-20 µs inside the
// timing region for one call in ten. Measured with perf (sys_exit tracepoint to the
// clock read after fdatasync, 10,029 calls): p90 8.8 µs, p99 22.3 µs without; 2.7 µs,
// 4.0 µs with. Not before every call: each Gosched also wakes an idle thread to look for
// work, which cost 29 % more CPU over 65,536 random reads (2.74 s against 2.13 s, fio
// 2.21 s). The calls stay ordinary blocking system calls, so an operation stuck in the
// kernel still gives its P back and the rest of the process keeps running, unlike a raw
// system call.
//
// The settler also keeps the thread's CPU-wait clock (cpu): a round runs locked to its
// thread, and the yield is where it may move to another.
type settler struct {
	last time.Time
	cpu  cpuClock
}

// settleEvery is well inside sysmon's 10 ms.
const settleEvery = 5 * time.Millisecond

func (s *settler) settle() {
	if now := time.Now(); now.Sub(s.last) >= settleEvery {
		s.cpu.yield()
		s.last = now
	}
}

// runRound runs round locked to its thread (see cpuClock) and fills in the round's CPU
// wait. Every prober's Round is this around its own round.
func (s *settler) runRound(ctx context.Context, env *Env, round func(context.Context, *Env) (Result, error)) (Result, error) {
	s.cpu.bind()
	res, err := round(ctx, env)
	res.CPUWait, res.CPUWaitKnown = s.cpu.release()
	return res, err
}

// timedCall is one system call a probe times: a pread or pwrite of buf at off, or an
// fdatasync (buf nil), on fd, the file at path.
type timedCall struct {
	sys  syscallKind
	fd   int
	buf  []byte
	off  int64
	path string
}

type syscallKind uint8

const (
	sysPread syscallKind = iota
	sysPwrite
	sysFdatasync
)

// op is how the call is named in its *os.PathError.
func (k syscallKind) op() string {
	switch k {
	case sysPread:
		return "read"
	case sysPwrite:
		return "write"
	}
	return "fdatasync"
}

// timed makes c as the outstanding operation and returns how long it took; short
// explains a read or write that moved n of its want bytes (nil for fdatasync) and is
// called after the timed region. The region holds nothing but the system call between
// the clock reads (ignoringEINTR says how a retried call is timed): the call is picked by
// a switch on c.sys, a compare and a branch, not by a func value, which would add an
// indirect call and a closure's prologue to every sample. short is a parameter, not a
// field of c: c leaks into the PathError with its path, and a func literal inside it was
// allocated on every call; as a parameter go build -gcflags=-m reports it "does not
// escape".
func (s *settler) timed(inflight *Inflight, c timedCall, short func(n, want int) error) (time.Duration, error) {
	s.settle()
	s.cpu.begin()
	var n int
	var d time.Duration
	t0 := time.Now()
	inflight.begin(t0)
	err := ignoringEINTR(func() (err error) {
		switch c.sys {
		case sysPread:
			n, err = unix.Pread(c.fd, c.buf, c.off)
		case sysPwrite:
			n, err = unix.Pwrite(c.fd, c.buf, c.off)
		default:
			err = unix.Fdatasync(c.fd)
		}
		d = time.Since(t0)
		return err
	})
	inflight.end()
	if err == nil && n != len(c.buf) {
		err = short(n, len(c.buf))
	}
	if err != nil {
		return d, &os.PathError{Op: c.sys.op(), Path: c.path, Err: err}
	}
	return d, nil
}

// readBlock is one timed O_DIRECT pread(2) of len(buf) bytes at off from src: the
// operation of both read probes.
func (s *settler) readBlock(inflight *Inflight, src *ReadSource, buf []byte, off int64) (time.Duration, error) {
	return s.timed(inflight, timedCall{sys: sysPread, fd: src.fd, buf: buf, off: off, path: src.path}, src.shortRead)
}

// budget waits for the budget of an operation of n bytes. A budget without a token makes
// the thread sleep outside any timed call: the CPU-wait segment closes first.
func (s *settler) budget(ctx context.Context, env *Env, n int) error {
	if !free(env.Budget, n) {
		s.cpu.pause()
	}
	return env.Budget.Wait(ctx, n)
}
