package probe

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// schedstatPath is the calling thread's scheduler statistics: time on a CPU, time spent
// runnable but waiting for one (run_delay), and timeslices, as "%d %d %d\n". It is the
// process's own /proc, never --path.procfs: the thread read is this process's. A
// variable for the tests of kernels that lack it.
var schedstatPath = "/proc/thread-self/schedstat"

// cpuClock reads how long the OS thread making a probe's timed calls waited for a CPU
// while it made them, from that thread's schedstat run_delay. A probe's timed region
// includes getting back onto a CPU after the system call returns, as etcd's wal_fsync
// does: on a host whose CPUs are saturated that wait, not the disk, is the latency.
//
// Reading it costs a system call, and one more system call per operation cost a tenth of
// a probe's CPU (docs/measurements.md#cpu-wait-clock): one reading before and one after
// each timed call was out of the question. So run_delay is read at the ends of
// segments: a segment opens just before a timed call (begin) and stays open over the
// operations that follow back to back, through the few microseconds of Go between them
// (observing the samples, filling the next buffer); it closes (pause) before anything
// that can make the thread wait outside the timed calls: a yield to the Go scheduler
// (round.settle), a rate limit without a token, an untimed call (round.untimed), the end
// of the round. The round does both (round.timed, round.waitBudget, round.untimed): a
// probe kind never does.
// What the count can hold beyond the timed calls is a preemption of the thread while it
// ran that Go between two operations: a few microseconds of the 60-190 µs of CPU an
// operation costs there, so a few per cent of the wait, counted, never hidden
// (docs/measurements.md#cpu-wait-clock).
//
// A round runs locked to one OS thread (bind), except around round.settle's yield, after
// which the thread is asked again: the daemon's worker goroutine is not locked between
// rounds, and a goroutine may come back from a blocking call or a yield on another
// thread. Descriptors are kept per thread (a Go process has few), so a goroutine that
// moves between a few threads does not reopen one each time.
type cpuClock struct {
	fds    []threadFD
	fd     int  // the descriptor of the current thread; valid when !broken && !off
	broken bool // a reading failed this round: the round's CPU wait is unknown
	off    bool // the kernel does not report run_delay (see unsupported): never asked again

	inSegment bool
	start     time.Duration // run_delay when the open segment began
	waited    time.Duration // closed segments of this round
	buf       [64]byte
}

type threadFD struct{ tid, fd int }

// bind starts a round: it locks the calling goroutine to its OS thread and finds that
// thread's descriptor. Every bind is followed by one release.
func (c *cpuClock) bind() {
	runtime.LockOSThread()
	c.broken, c.inSegment, c.waited = false, false, 0
	c.onThread()
}

// release ends the round, unlocks the thread, and says how long it waited for a CPU in
// its segments, and whether every reading succeeded.
func (c *cpuClock) release() (time.Duration, bool) {
	c.pause()
	runtime.UnlockOSThread()
	return c.waited, !c.broken && !c.off
}

// yield passes through the Go scheduler, unlocked (a locked goroutine's Gosched hands its
// thread over and back), outside any segment, and finds the thread it came back on.
func (c *cpuClock) yield() {
	c.pause()
	runtime.UnlockOSThread()
	runtime.Gosched()
	runtime.LockOSThread()
	c.onThread()
}

// onThread makes fd the current thread's.
func (c *cpuClock) onThread() {
	if c.off {
		return
	}
	tid := unix.Gettid()
	for _, t := range c.fds {
		if t.tid == tid {
			c.fd = t.fd
			return
		}
	}
	fd, err := openFD(schedstatPath, unix.O_RDONLY, 0)
	if err != nil {
		c.fail(err)
		return
	}
	c.fds = append(c.fds, threadFD{tid, fd})
	c.fd = fd
}

// begin is called just before a timed region starts: it opens a segment unless one is open.
func (c *cpuClock) begin() {
	if c.inSegment || c.broken || c.off {
		return
	}
	if d, ok := c.read(); ok {
		c.start, c.inSegment = d, true
	}
}

// pause closes the open segment, just after a timed region ended, before the thread may
// wait outside one.
func (c *cpuClock) pause() {
	if !c.inSegment {
		return
	}
	c.inSegment = false
	if d, ok := c.read(); ok {
		c.waited += max(d-c.start, 0)
	}
}

func (c *cpuClock) read() (time.Duration, bool) {
	if c.broken || c.off {
		return 0, false
	}
	d, err := readRunDelay(c.fd, c.buf[:])
	if err != nil {
		c.fail(err)
		return 0, false
	}
	return d, true
}

// fail gives up on the round's count; on every later one too when the kernel will never
// answer. The descriptors are closed: a thread that has exited leaves a descriptor that
// answers nothing, and its tid may come back.
func (c *cpuClock) fail(err error) {
	c.broken, c.inSegment = true, false
	c.off = c.off || unsupported(err)
	c.closeFDs()
}

func (c *cpuClock) closeFDs() {
	for _, t := range c.fds {
		_ = unix.Close(t.fd)
	}
	c.fds = c.fds[:0]
}

// unsupported is whether a failure to read schedstat will recur on every thread: the
// file is absent (Linux before 3.17, CONFIG_SCHED_INFO off, gVisor), refused, or not in
// the format the parser knows. Other errors (out of descriptors) may pass.
func unsupported(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.ENOTDIR) || errors.Is(err, errSchedstatFormat) || errors.Is(err, errNoSchedInfo)
}

var (
	errSchedstatFormat = errors.New("not three unsigned decimal fields and a newline")
	// A kernel with scheduler statistics off at run time reports "0 0 0" for every thread.
	// Its third field, the times the thread was put on a CPU, is at least 1 for a thread
	// that reads its own file; the first is not: a thread created moments ago reads
	// "0 4912 1" until its first tick updates its time on a CPU.
	errNoSchedInfo = errors.New("the kernel reports no scheduler statistics (never put on a CPU)")
)

// readRunDelay preads schedstat at offset 0, which makes the kernel write it anew.
func readRunDelay(fd int, buf []byte) (time.Duration, error) {
	var n int
	err := ignoringEINTR(func() (err error) {
		n, err = unix.Pread(fd, buf, 0)
		return err
	})
	if err != nil {
		return 0, err
	}
	_, runDelay, err := parseSchedstat(buf[:n])
	return runDelay, err
}

// parseSchedstat parses a schedstat file strictly: three unsigned decimal fields
// separated by single spaces and ended by a newline, nothing else. A kernel that ever
// adds a field or changes the format turns the measure off rather than misread it.
func parseSchedstat(b []byte) (onCPU, runDelay time.Duration, err error) {
	var f [3]uint64
	i := 0
	for k := range f {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if f[k] > (1<<63-1-9)/10 {
				return 0, 0, fmt.Errorf("schedstat %q: %w", b, errSchedstatFormat)
			}
			f[k] = f[k]*10 + uint64(b[i]-'0')
			i++
		}
		sep := byte(' ')
		if k == len(f)-1 {
			sep = '\n'
		}
		if i == start || i >= len(b) || b[i] != sep {
			return 0, 0, fmt.Errorf("schedstat %q: %w", b, errSchedstatFormat)
		}
		i++
	}
	if i != len(b) {
		return 0, 0, fmt.Errorf("schedstat %q: %w", b, errSchedstatFormat)
	}
	if f[2] == 0 {
		return 0, 0, errNoSchedInfo
	}
	return time.Duration(f[0]), time.Duration(f[1]), nil
}

// CheckCPUWait says whether this kernel reports how long a thread waits for a CPU, the
// measure behind Result.CPUWait; nil when it does. The daemon logs its answer once.
func CheckCPUWait() error {
	fd, err := openFD(schedstatPath, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("CPU wait of the probes not measured: %s: %w", schedstatPath, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var buf [64]byte
	if _, err := readRunDelay(fd, buf[:]); err != nil {
		return fmt.Errorf("CPU wait of the probes not measured: %s: %w", schedstatPath, err)
	}
	return nil
}
