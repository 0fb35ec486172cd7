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

// reuseWithin is how recent the last reading of run_delay must be to stand for the
// reading before a timed call. run_delay grows only when the thread gets a CPU back after
// waiting for one, by the length of that wait, so between two readings less than
// reuseWithin apart it cannot have grown by more than reuseWithin. Between back-to-back
// operations (a round within its budget's burst) the thread runs a few microseconds of Go
// and makes no system call, so the reading after one operation is the reading before the
// next: one pread per operation instead of two. A pread of schedstat costs 2.1 µs of CPU
// on the 2-CPU VM of BENCHMARKS.md (PTI makes every system call cost 1.2 µs there), which
// was 3.4 % of a 4 KiB random read's CPU: two per operation would have been 7 %.
const reuseWithin = 20 * time.Microsecond

// cpuClock reads how long the OS thread making a probe's timed calls waited for a CPU
// while it made them, from that thread's schedstat. A probe's timed region includes
// getting back onto a CPU after the system call returns, as etcd's wal_fsync does: on a
// host whose CPUs are saturated that wait, not the disk, is the latency. The readings are
// taken outside the timed region, just before it starts and just after it ends.
//
// A round runs locked to one OS thread (bind), so that every timed call of the round and
// every reading are the same thread's: the daemon's worker goroutine is not locked
// between rounds, and a goroutine may otherwise come back from a blocking call or a
// Gosched on another thread. The descriptor is opened on the thread of the round that
// first needs it and kept while rounds run on that thread: a goroutine that does not
// block between rounds stays on it; otherwise the next round reopens it.
type cpuClock struct {
	open   bool // fd is schedstatPath as opened on thread tid
	fd     int
	tid    int
	broken bool          // a reading failed this round: the round's CPU wait is unknown
	off    bool          // the kernel does not report run_delay (see checkSchedstat): never asked again
	last   time.Duration // run_delay at the last reading
	lastAt time.Time     // when that reading was taken; zero: none this round
	buf    [64]byte
}

// bind locks the calling goroutine to its OS thread for the round and makes sure the
// descriptor is that thread's. Every bind is followed by one release.
func (c *cpuClock) bind() {
	runtime.LockOSThread()
	c.broken, c.lastAt = false, time.Time{}
	if c.off {
		return
	}
	if tid := unix.Gettid(); !c.open || tid != c.tid {
		c.closeFD()
		fd, err := openFD(schedstatPath, unix.O_RDONLY, 0)
		if err != nil {
			c.broken = true
			c.off = unsupported(err)
			return
		}
		c.open, c.fd, c.tid = true, fd, tid
	}
}

// release ends the round: the goroutine may leave the thread again.
func (c *cpuClock) release() { runtime.UnlockOSThread() }

// before is run_delay read just before a timed region starts (see reuseWithin).
func (c *cpuClock) before() time.Duration {
	if !c.lastAt.IsZero() && time.Since(c.lastAt) < reuseWithin {
		return c.last
	}
	return c.read()
}

// after is run_delay read just after a timed region ends.
func (c *cpuClock) after() time.Duration { return c.read() }

func (c *cpuClock) read() time.Duration {
	if c.broken || c.off {
		return 0
	}
	d, err := readRunDelay(c.fd, c.buf[:])
	if err != nil {
		c.broken = true
		c.off = unsupported(err)
		c.closeFD() // the next round opens it again, on its own thread
		return 0
	}
	c.last, c.lastAt = d, time.Now()
	return d
}

// known is whether every reading of the round succeeded.
func (c *cpuClock) known() bool { return !c.broken && !c.off }

func (c *cpuClock) closeFD() {
	if c.open {
		_ = unix.Close(c.fd)
		c.open = false
	}
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
	// A kernel built without scheduler statistics at run time reports "0 0 0" for every
	// thread; a thread that reads its own file has run, so 0 time on a CPU means that.
	errNoSchedInfo = errors.New("the kernel reports no scheduler statistics (0 time on a CPU)")
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
	if f[0] == 0 {
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
