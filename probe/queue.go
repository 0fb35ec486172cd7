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
}

// sharedBufferAbove is the memory in flight above which the workers of a job share one
// buffer: 32 × 64 MiB of private buffers would be 2 GiB. The data read is never looked
// at and the data written is random either way, so sharing changes what the disk does
// in nothing.
const sharedBufferAbove = 64 << 20

// RunQueue runs job on src, reads only unless job.ReadMix < 100, in which case src must
// be a probe file (writes go into its data, never its header); a block device is refused.
//
// Queue depth N is N threads, each locked to its OS thread, each doing one blocking pread
// or pwrite at a time, timed around the system call alone. fio's libaio reaps completions
// in a single thread; measured side by side on the same files (BENCHMARKS.md, "Queue
// depth"), N threads of pread agree with fio's libaio iodepth=N within the goals, and an
// I/O stuck in the kernel still gives its P back, as everywhere in this package.
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
	if !src.ready() {
		return res, ErrNotPrepared
	}
	wfd := -1
	if job.ReadMix < 100 {
		fd, err := src.openForWrites()
		if err != nil {
			return res, err
		}
		wfd = fd
		defer unix.Close(wfd)
	}

	bufs := make([][]byte, job.Depth)
	for i := range bufs {
		if i > 0 && int64(job.Depth)*int64(job.BlockSize) > sharedBufferAbove {
			bufs[i] = bufs[0]
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
		bufs[i] = b
	}

	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	bs := int64(job.BlockSize)
	first := src.firstBlock(bs)
	var next atomic.Int64 // sequential: the next block, counted from first
	blocks := (src.end - first) / bs
	next.Store(src.randomOffset(rand.New(newRNG()), bs)/bs - first/bs)

	type worker struct {
		read, write DirectionResult
		err         error
	}
	workers := make([]worker, job.Depth)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(job.Runtime)
	for i := range workers {
		wg.Add(1)
		go func(w *worker, buf []byte) {
			defer wg.Done()
			// Its own OS thread, as each of fio's in-flight I/Os has its own slot: a
			// goroutine moved between threads mid-job would add the move to a sample.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rng := rand.New(newRNG())
			// An I/O is not started when one as long as the last would end after the
			// deadline: with 32 × 64 MiB in flight a cell would otherwise overrun its
			// runtime by a whole round of I/O. The first always starts.
			var last time.Duration
			for !stop.Load() && time.Now().Add(last).Before(deadline) {
				if err := env.Budget.Wait(ctx, job.BlockSize); err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						w.err = err
					}
					return
				}
				var off int64
				if job.Random {
					off = src.randomOffset(rng, bs)
				} else {
					off = first + (next.Add(1)-1)%blocks*bs
				}
				read := job.ReadMix == 100 || rng.IntN(100) < job.ReadMix
				var n int
				var err error
				t0 := time.Now()
				if read {
					n, err = unix.Pread(src.fd, buf, off)
				} else {
					n, err = unix.Pwrite(wfd, buf, off)
				}
				d := time.Since(t0)
				last = d
				dir, op := &w.read, "read"
				if !read {
					dir, op = &w.write, "write"
				}
				if err == nil && n != len(buf) {
					if read {
						err = src.shortRead(n, len(buf))
					} else {
						err = fmt.Errorf("short write at offset %d: %d of %d bytes", off, n, len(buf))
					}
				}
				if err != nil {
					w.err = &os.PathError{Op: op, Path: src.path, Err: err}
					stop.Store(true)
					return
				}
				dir.Ops++
				dir.Bytes += int64(n)
				dir.Lat = append(dir.Lat, d)
			}
		}(&workers[i], bufs[i])
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var errs []error
	for _, w := range workers {
		errs = append(errs, w.err)
		for _, pair := range [][2]*DirectionResult{{&res.Read, &w.read}, {&res.Write, &w.write}} {
			pair[0].Ops += pair[1].Ops
			pair[0].Bytes += pair[1].Bytes
			pair[0].Lat = append(pair[0].Lat, pair[1].Lat...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// ErrBlockDeviceWrite is the refusal to write to a block device, whatever asks.
var ErrBlockDeviceWrite = errors.New("nothing is ever written to a block device")

// openForWrites opens the prepared probe file for O_DIRECT writes into its data. A
// block device has no probe file and is refused: it is only ever opened read-only.
func (s *ReadSource) openForWrites() (int, error) {
	if s.prep == nil {
		return -1, fmt.Errorf("%s: %w", s.path, ErrBlockDeviceWrite)
	}
	f, h, err := openOwn(s.path, unix.O_RDONLY)
	if err != nil {
		return -1, err
	}
	f.Close()
	if h.Kind != "read" {
		return -1, &ForeignFileError{Path: s.path, Reason: "it is not a read probe file"}
	}
	fd, err := unix.Open(s.path, unix.O_WRONLY|unix.O_DIRECT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, openDirectError(s.path, err)
	}
	return fd, nil
}

// Size is the number of data bytes reads and writes address.
func (s *ReadSource) Size() int64 { return s.end - s.start }
