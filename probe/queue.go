package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// QueueJob is one fio-like job of the one-shot check: O_DIRECT I/O of BlockSize bytes
// kept Depth deep for Runtime, as fio's `ioengine=libaio direct=1 iodepth=Depth` runs it.
// The daemon never runs one: it keeps at most one operation outstanding per target.
type QueueJob struct {
	BlockSize int
	Depth     int
	Random    bool          // random aligned offsets; otherwise sequential, each I/O taking the next block
	ReadMix   int           // percentage of reads, 0 to 100; the rest are writes (randrw)
	Runtime   time.Duration // no I/O starts that would end after it, by the last one's time; those outstanding finish
	Mechanism string        // "" is Linux AIO where io_setup works; MechanismThreads forces the fallback
}

// DirectionResult is what a job did in one direction, every operation timed.
type DirectionResult struct {
	Ops   int
	Bytes int64
	Lat   []time.Duration // each operation, in no particular order
}

// QueueResult is what a job did.
type QueueResult struct {
	Read, Write DirectionResult
	Elapsed     time.Duration // from the first I/O's start to the last one's end
	Mechanism   string        // MechanismAIO, or MechanismThreads where io_setup is refused
	// Submitting is the time spent inside io_submit (AIO only). Near Elapsed, the
	// filesystem served each I/O before io_submit returned (FUSE without async direct
	// I/O): the queue held one I/O at a time, whatever the depth.
	Submitting time.Duration
}

// sharedBufferAbove is the memory in flight above which the workers of a job share one
// buffer: 32 × 64 MiB of private buffers would be 2 GiB. The data read is never looked
// at and the data written is random either way, so sharing changes what the disk does
// in nothing.
const sharedBufferAbove = 64 << 20

// RunQueue runs job on src, reads only unless job.ReadMix < 100, in which case src must
// be a probe file (writes go into its data, never its header); a block device is refused.
//
// Queue depth N is N I/Os in flight from one goroutine through Linux native AIO, raw
// system calls as fio's libaio engine makes them with its defaults: one io_submit per I/O
// (iodepth_batch_submit=1), one completion per io_getevents (see aio.wait), each I/O
// timed from just before its io_submit to just after the io_getevents that reaps it
// (fio's `lat`).
// Chosen over blocking preads on N threads and over io_uring by measurement against fio
// (docs/measurements.md#runqueue): one io_submit and one io_getevents per I/O is what
// agrees with fio's libaio, which the users' own recipe runs.
//
// Where io_setup is refused, the threads run instead (GOMAXPROCS raised for the job) and
// Mechanism says so. Each wait is an ordinary blocking system call: an I/O stuck in the
// kernel leaves the rest of the process running, and the one-shot check that calls this
// gives up after its grace time.
//
// A job is not a probe kind and stays outside their contract (round.go), which times
// calls one thread makes back to back: here Depth I/Os are in flight at once, timed from
// submission to reaping, so there is no one outstanding call to mark in flight and no one
// thread whose CPU wait is theirs, and the daemon, whose in-flight age and CPU wait those
// are, never runs a job.
func RunQueue(ctx context.Context, src *ReadSource, job QueueJob, env *Env) (QueueResult, error) {
	var res QueueResult
	if job.Depth < 1 {
		return res, fmt.Errorf("queue depth %d: at least 1", job.Depth)
	}
	if job.ReadMix < 0 || job.ReadMix > 100 {
		return res, fmt.Errorf("read mix %d %%: between 0 and 100", job.ReadMix)
	}
	if err := src.checkBlockSize("job", int64(job.BlockSize)); err != nil {
		return res, err
	}
	var err error
	env.Inflight.Do(func() { err = src.check() })
	if err != nil {
		return res, err
	}
	if !src.Ready() {
		return res, ErrNotPrepared
	}
	q := &queueRun{src: src, job: job, env: env, wfd: -1, bs: int64(job.BlockSize)}
	if job.ReadMix < 100 {
		fd, err := src.openForWrites()
		if err != nil {
			return res, err
		}
		q.wfd = fd
		defer func() { _ = unix.Close(fd) }()
	}
	q.bufs = make([][]byte, job.Depth)
	for i := range q.bufs {
		if i > 0 && int64(job.Depth)*int64(job.BlockSize) > sharedBufferAbove {
			q.bufs[i] = q.bufs[0]
			continue
		}
		b, err := alignedBuffer(job.BlockSize)
		if err != nil {
			return res, err
		}
		defer freeBuffer(b)
		// Written data is random, as fio's buffers: a compressing or deduplicating
		// device must not see zeros.
		newRNG().Read(b)
		q.bufs[i] = b
	}
	defer context.AfterFunc(ctx, func() { q.stop.Store(true) })()
	q.first = src.firstBlock(q.bs)
	q.blocks = (src.end - q.first) / q.bs
	q.next.Store(src.randomOffset(rand.New(newRNG()), q.bs)/q.bs - q.first/q.bs)

	switch job.Mechanism {
	case MechanismThreads:
		res.Mechanism = MechanismThreads
		err = q.runThreads(ctx, &res)
	default:
		var a *aio
		if a, err = newAIO(job.Depth); err == nil {
			defer a.close()
			res.Mechanism = MechanismAIO
			err = q.runAIO(ctx, a, &res)
		} else if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			res.Mechanism = MechanismThreads
			err = q.runThreads(ctx, &res)
		}
	}
	if err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// Mechanisms that keep a queue depth.
const (
	MechanismAIO     = "libaio"
	MechanismThreads = "threads" // one blocking pread/pwrite per OS thread
)

// queueRun is one job under way.
type queueRun struct {
	src    *ReadSource
	job    QueueJob
	env    *Env
	wfd    int
	bs     int64
	bufs   [][]byte
	stop   atomic.Bool
	first  int64
	blocks int64
	next   atomic.Int64 // sequential: the next block, counted from first
}

// pick is the next I/O: its offset and whether it writes.
func (q *queueRun) pick(rng *rand.Rand) (off int64, write bool) {
	if q.job.Random {
		off = q.src.randomOffset(rng, q.bs)
	} else {
		off = q.first + (q.next.Add(1)-1)%q.blocks*q.bs
	}
	return off, q.job.ReadMix < 100 && rng.IntN(100) >= q.job.ReadMix
}

// more says whether another I/O may start now: not after a stop, nor when one as long
// as the slot's last (0 for its first) would end after the deadline. Without that rule a
// cell of 32 × 64 MiB reads overran its runtime by a whole round of I/O.
func (q *queueRun) more(ctx context.Context, now time.Time, last time.Duration, deadline time.Time) bool {
	if q.stop.Load() || !now.Add(last).Before(deadline) {
		return false
	}
	return q.env.Budget.Wait(ctx, q.job.BlockSize) == nil
}

func (q *queueRun) done(res *QueueResult, write bool, n int, d time.Duration) {
	dir := &res.Read
	if write {
		dir = &res.Write
	}
	dir.Ops++
	dir.Bytes += int64(n)
	dir.Lat = append(dir.Lat, d)
}

func (q *queueRun) ioError(write bool, off int64, n int, err error) error {
	if err == nil {
		if !write {
			err = q.src.shortRead(n, int(q.bs))
		} else {
			err = fmt.Errorf("short write at offset %d: %d of %d bytes", off, n, q.bs)
		}
	}
	op := "read"
	if write {
		op = "write"
	}
	return &os.PathError{Op: op, Path: q.src.path, Err: err}
}

func (q *queueRun) runAIO(ctx context.Context, a *aio, res *QueueResult) error {
	depth := q.job.Depth
	starts := make([]time.Time, depth)
	writes := make([]bool, depth)
	offs := make([]int64, depth)
	rng := rand.New(newRNG())
	inflight := 0
	var firstErr error
	submit := func(slot int) {
		offs[slot], writes[slot] = q.pick(rng)
		fd := q.src.fd
		if writes[slot] {
			fd = q.wfd
		}
		starts[slot] = time.Now()
		err := a.submit(writes[slot], fd, q.bufs[slot], offs[slot], uint64(slot))
		res.Submitting += time.Since(starts[slot])
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			q.stop.Store(true)
			return
		}
		inflight++
	}
	start := time.Now()
	deadline := start.Add(q.job.Runtime)
	for slot := range depth {
		if q.more(ctx, start, 0, deadline) {
			submit(slot)
		}
	}
	for inflight > 0 {
		if err := a.wait(); err != nil {
			// Nothing can be reaped any more: io_destroy waits for what is in flight.
			return errors.Join(firstErr, err)
		}
		now := time.Now()
		a.reap(func(tag uint64, n int32) {
			slot := int(tag)
			inflight--
			d := now.Sub(starts[slot])
			switch {
			case n < 0:
				firstErr = cmpOr(firstErr, q.ioError(writes[slot], offs[slot], 0, unix.Errno(-n)))
				q.stop.Store(true)
				return
			case int64(n) != q.bs:
				firstErr = cmpOr(firstErr, q.ioError(writes[slot], offs[slot], int(n), nil))
				q.stop.Store(true)
				return
			}
			q.done(res, writes[slot], int(n), d)
			if q.more(ctx, now, d, deadline) {
				submit(slot)
			}
		})
	}
	res.Elapsed = time.Since(start)
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (q *queueRun) runThreads(ctx context.Context, res *QueueResult) error {
	// Each thread blocked in a system call keeps its P until sysmon takes it back: with
	// GOMAXPROCS at the machine's 2 CPUs, only a few of N I/Os were in flight.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), q.job.Depth+2)))
	type worker struct {
		res QueueResult
		err error
	}
	workers := make([]worker, q.job.Depth)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(q.job.Runtime)
	for i := range workers {
		wg.Add(1)
		go func(w *worker, buf []byte) {
			defer wg.Done()
			// Its own OS thread, as each of fio's in-flight I/Os has its own slot: a
			// goroutine moved between threads mid-job would add the move to a sample.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rng := rand.New(newRNG())
			var last time.Duration
			for q.more(ctx, time.Now(), last, deadline) {
				off, write := q.pick(rng)
				var n int
				var err error
				t0 := time.Now()
				err = ignoringEINTR(func() (err error) {
					if write {
						n, err = unix.Pwrite(q.wfd, buf, off)
					} else {
						n, err = unix.Pread(q.src.fd, buf, off)
					}
					last = time.Since(t0)
					return err
				})
				if err != nil || n != len(buf) {
					w.err = q.ioError(write, off, n, err)
					q.stop.Store(true)
					return
				}
				q.done(&w.res, write, n, last)
			}
		}(&workers[i], q.bufs[i])
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var errs []error
	for _, w := range workers {
		errs = append(errs, w.err)
		for _, pair := range [][2]*DirectionResult{{&res.Read, &w.res.Read}, {&res.Write, &w.res.Write}} {
			pair[0].Ops += pair[1].Ops
			pair[0].Bytes += pair[1].Bytes
			pair[0].Lat = append(pair[0].Lat, pair[1].Lat...)
		}
	}
	return errors.Join(errs...)
}

// ErrBlockDeviceWrite is the refusal to write to a block device, whatever asks.
var ErrBlockDeviceWrite = errors.New("nothing is ever written to a block device")

// openForWrites is a descriptor for O_DIRECT writes into the prepared probe file's data:
// a duplicate of the one its reads use, checked when it was opened, never the file opened
// again by its path. A block device has no probe file and is refused: it is only ever
// opened read-only.
func (s *ReadSource) openForWrites() (int, error) {
	if s.fill == nil {
		return -1, fmt.Errorf("%s: %w", s.path, ErrBlockDeviceWrite)
	}
	if s.fd < 0 {
		return -1, fmt.Errorf("%s: %w", s.path, ErrNotPrepared)
	}
	fd, err := unix.Dup(s.fd)
	if err != nil {
		return -1, &os.PathError{Op: "dup", Path: s.path, Err: err}
	}
	return fd, nil
}

// Size is the number of data bytes reads and writes address.
func (s *ReadSource) Size() int64 { return s.end - s.start }
