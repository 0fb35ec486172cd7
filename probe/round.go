package probe

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// kind is the I/O of one probe kind: its files, its buffers and the system calls of a
// round, in order. It is not a Prober: prober makes it one, and does around each round
// what every kind needs and none may leave out (bind the round to its thread and read
// the thread's CPU wait; close the clock's descriptors at Close). A kind has no clock and
// no Env: it reaches the disk, the budget and the in-flight mark only through the round
// it is given, whose methods each do the steps their wait needs.
//
// A new kind is a struct with these two methods, wrapped in prober by its constructor
// (as Fsync, Randread, Seqread, Seqwrite and Commit are), and declared to the rest of the
// exporter by its Kind (kinds.go), in the same file. contract_test.go has one, shows what
// the compiler says to a kind that leaves a step out, and fails a file of this package
// other than this one that reaches into a round, the clock or the in-flight mark (the
// compiler cannot: every file of a package sees every unexported field).
type kind interface {
	// run does one round's operations through r. A round that takes a step of its
	// file's preparation (filler.step) returns ErrNotPrepared instead, and one whose
	// write would eat into the free-space floor ErrLowFreeSpace.
	run(ctx context.Context, r *round) (Result, error)
	// closeFiles closes the kind's files and frees its buffers; it removes nothing from
	// disk. The round's clock is not the kind's: a kind that drops its file within a
	// round (a replaced directory, a failed fdatasync) calls it freely.
	closeFiles() error
}

// prober is the Prober of every kind. Round binds the round to its OS thread (see
// cpuClock), runs the kind, and fills in the round's CPU wait; Close closes the clock's
// descriptors, then the kind's files. The clock lives here, not in the kind, so nothing
// a kind does to its own files can close the clock's descriptors, and no kind can forget
// to.
type prober[K kind] struct {
	kind  K
	round round
}

// Round runs one round of the kind.
func (p *prober[K]) Round(ctx context.Context, env *Env) (Result, error) {
	r := &p.round
	r.env = env
	r.clock.bind()
	res, err := p.kind.run(ctx, r)
	res.CPUWait, res.CPUWaitKnown = r.clock.release()
	r.env = nil
	return res, err
}

// Close closes the clock's descriptors and the kind's files.
func (p *prober[K]) Close() error {
	p.round.clock.closeFDs()
	return p.kind.closeFiles()
}

// round is what a kind may do in a round: time system calls (timed), make a call that may
// hang but is not timed (untimed), wait for the budget (waitBudget), and pass on samples
// and notices. Each method keeps the thread's CPU-wait clock and the in-flight mark right
// for its wait; a kind never touches either. Its fields are the wrapper's.
type round struct {
	env     *Env // of the round under way; nil between rounds
	clock   cpuClock
	settled time.Time // the last pass through the Go scheduler (settle)
}

// waitBudget waits for the budget of one operation of n bytes. A budget without a token
// makes the thread sleep outside any timed call: the CPU-wait segment closes first.
func (r *round) waitBudget(ctx context.Context, n int) error {
	if r.env.Budget.WouldWait(n) {
		r.clock.pause()
	}
	return r.env.Budget.Wait(ctx, n)
}

// untimed makes fn's file system calls (statfs, fstat, creating and allocating a file) as
// the outstanding operation, untimed: on a hung filesystem they hang as a write does, and
// must show the same age. The CPU-wait segment closes first: fn may wait for the disk.
func (r *round) untimed(fn func() error) error {
	r.clock.pause()
	r.env.Inflight.begin(time.Now())
	defer r.env.Inflight.end()
	return fn()
}

func (r *round) observe(s Sample) { r.env.observe(s) }

func (r *round) notice(msg string) { r.env.notice(msg) }

// ioCall is one system call of a timed region: a pread or pwrite of buf at off, or an
// fdatasync (buf nil), on fd.
type ioCall struct {
	sys  syscallKind
	fd   int
	buf  []byte
	off  int64
	took time.Duration // set by timed: from the previous call's end (the region's start) to its own
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

// timed makes calls (at least one), on the file at path, back to back as one timed
// region and the round's outstanding operation, each call marked in flight from its own
// start. Each call's took runs from the end of the one before (the first's from the
// region's start) to just after it returns, with one clock read between two calls; total
// is the region's. A call that fails or moves fewer bytes than len(buf) ends the region:
// made counts the calls made, that one included (its took is set), and err is its
// *os.PathError. short explains a read or write that moved n of its want bytes (nil:
// "short write at offset ..."); it is called after the region.
//
// The region holds nothing but the system calls between the clock reads (ignoringEINTR
// says how a retried call is timed). The clock is read as time.Since(inflightEpoch): one
// monotonic reading, which time.Now adds a wall clock reading to, and an offset that is
// the in-flight mark as it is, where a time.Time would cost a subtraction inside the
// region. The call is picked by a switch on c.sys, a compare and a branch, not by a func
// value, which would add an indirect call and a closure's prologue to every sample.
// short is a parameter, not a field of an ioCall, so that go build -gcflags=-m reports
// it "does not escape": a func literal in a struct that leaks into the PathError was
// allocated on every call. Before the region the round passes through the Go scheduler
// if it is due (settle) and opens a CPU-wait segment; the segment stays open after it,
// over the operations that follow back to back (see cpuClock).
func (r *round) timed(path string, calls []ioCall, short func(n, want int) error) (total time.Duration, made int, err error) {
	r.settle()
	r.clock.begin()
	inflight := r.env.Inflight
	var n int
	var end time.Duration
	start := time.Since(inflightEpoch)
	inflight.beginAt(start)
	for i := range calls {
		c := &calls[i]
		err = ignoringEINTR(func() (err error) {
			switch c.sys {
			case sysPread:
				n, err = unix.Pread(c.fd, c.buf, c.off)
			case sysPwrite:
				n, err = unix.Pwrite(c.fd, c.buf, c.off)
			default:
				n = 0
				err = unix.Fdatasync(c.fd)
			}
			end = time.Since(inflightEpoch)
			return err
		})
		c.took = end
		made++
		if err != nil || n != len(c.buf) {
			break
		}
		inflight.beginAt(end)
	}
	inflight.end()
	for i := made - 1; i > 0; i-- {
		calls[i].took -= calls[i-1].took
	}
	c := &calls[made-1]
	calls[0].took -= start
	if err == nil && n != len(c.buf) {
		if short != nil {
			err = short(n, len(c.buf))
		} else {
			err = fmt.Errorf("short %s at offset %d: %d of %d bytes", c.sys.op(), c.off, n, len(c.buf))
		}
	}
	if err != nil {
		return end - start, made, &os.PathError{Op: c.sys.op(), Path: path, Err: err}
	}
	return end - start, made, nil
}

// settle passes the round through the Go scheduler before a timed region, outside it,
// when it has not passed through it for settleEvery. The runtime's sysmon takes the P
// from a goroutine blocked in a system call once that P has scheduled nothing for 10 ms.
// A probe loop never blocks in Go between back-to-back operations (a round within the
// budget's burst, a benchmark), so after its first 10 ms every system call longer than
// sysmon's tick lost its P and, on the way out, had to take one back and wake the
// sleeping sysmon, which then preempted the prober: 10-20 µs inside the timing region
// for one call in ten. Not before every call: each Gosched also wakes an idle thread to
// look for work, which cost a quarter more CPU (docs/measurements.md#settle). The calls
// stay ordinary blocking system calls, so an operation stuck in the kernel still gives
// its P back and the rest of the process keeps running, unlike a raw system call.
//
// The yield is where a round, locked to its thread, may move to another: the clock
// finds the new thread's descriptor (cpuClock.yield).
func (r *round) settle() {
	if now := time.Now(); now.Sub(r.settled) >= settleEvery {
		r.clock.yield()
		r.settled = now
	}
}

// settleEvery is well inside sysmon's 10 ms.
const settleEvery = 5 * time.Millisecond
