package check

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Defaults and bounds of the first-write profile.
const (
	// DefaultFirstWriteRuntime bounds the profile's time: the founding benchmarks saw fresh
	// volumes pay their first-write penalty for about ten minutes; five minutes of a file of
	// our own shows the penalty and, on a volume that warms per block, its end.
	DefaultFirstWriteRuntime = 5 * time.Minute
	// DefaultFirstWriteFileSize bounds its space: at 4 KiB, first writes of 2 ms each (500
	// a second) and every other write a first write, its 65,536 blocks are all written once
	// within 2 to 4.5 minutes, depending on the rewrites' speed.
	DefaultFirstWriteFileSize = 256 * config.MiB
	// DefaultFirstWriteBlock is fio's randwrite block, the one of the founding benchmarks.
	DefaultFirstWriteBlock = 4 * config.KiB
	// DefaultFirstWriteInterval is how often the IOPS are reported.
	DefaultFirstWriteInterval = 5 * time.Second
	// stableIntervals in a row within ±stableSpread of their mean, with no first write
	// among them, end the profile early: warmed up.
	stableIntervals = 3
	stableSpread    = 0.10
	// penaltyFloor is the smallest first-write penalty reported as one: below it, first
	// writes and rewrites differ by no more than intervals of one kind differ.
	penaltyFloor = 0.10
)

// Verdicts of the first-write profile.
const (
	WarmedUp  = "warmed-up"
	WarmingUp = "warming-up"
)

// FirstWriteOptions say what the first-write profile does.
type FirstWriteOptions struct {
	Path      string
	ProbeDir  string
	BlockSize int
	FileSize  int64
	Runtime   time.Duration // the bound: it stops earlier once stable
	Interval  time.Duration
	Paths     device.Paths
	Progress  *Progress
}

// WriteInterval is one reporting interval.
type WriteInterval struct {
	Start, Elapsed time.Duration
	Ops            int
	FirstWrites    int // writes to blocks of the file never written before
	IOPS           float64
	FirstWriteMean time.Duration // 0 when none
	RewriteMean    time.Duration // 0 when none
}

// FirstWriteReport is what the first-write profile measured.
type FirstWriteReport struct {
	Path        string
	Device      *Device
	BlockSize   int
	FileSize    int64
	Interval    time.Duration
	Runtime     time.Duration // the bound
	Elapsed     time.Duration
	Direct      bool // O_DIRECT; otherwise each write is followed by fdatasync
	Blocks      int
	Written     int // blocks written at least once
	Intervals   []WriteInterval
	Verdict     string
	WarmedUpAt  time.Duration // start of the first stable interval; valid when WarmedUp
	FirstMean   time.Duration // over the whole run
	RewriteMean time.Duration
	Penalty     float64 // 1 - first-write IOPS / rewrite IOPS; 0 when not measured
	Warnings    []string
}

// FirstWrite writes a new file of its own in a scratch directory of PATH (removed before
// it returns, Ctrl-C included): every other write goes to a block of the file never
// written before, in random order, the others rewrite a random block already written,
// so that each interval times first writes and rewrites side by side; once every block
// has been written the writes are all rewrites. It stops when the IOPS are stable
// without first writes, or at opts.Runtime. A block device is refused: check never
// writes one.
func FirstWrite(ctx context.Context, opts FirstWriteOptions) (*FirstWriteReport, error) {
	switch {
	case opts.Runtime <= 0:
		return nil, fmt.Errorf("--runtime %s: must be positive", opts.Runtime)
	case opts.Interval <= 0 || opts.Interval > opts.Runtime:
		return nil, fmt.Errorf("--interval %s: positive, at most --runtime (%s)", opts.Interval, opts.Runtime)
	case opts.BlockSize < 512 || opts.BlockSize%512 != 0 || opts.BlockSize > int(config.MaxBlockSize):
		return nil, fmt.Errorf("--bs %d: a multiple of 512 B up to %s", opts.BlockSize, config.FormatSize(config.MaxBlockSize))
	case opts.FileSize < 1*config.MiB || opts.FileSize%(1*config.MiB) != 0:
		return nil, fmt.Errorf("--file-size %d: a whole number of MiB, at least 1MiB", opts.FileSize)
	case opts.FileSize < int64(opts.BlockSize):
		return nil, fmt.Errorf("--bs %d is larger than --file-size %d", opts.BlockSize, opts.FileSize)
	}
	tg, err := openTarget(ctx, opts.Path, opts.ProbeDir, opts.Paths)
	if err != nil {
		return nil, err
	}
	if tg.isDevice {
		return nil, fmt.Errorf("%s is a block device and first-write writes: %w; run it on a directory of the filesystem on it", opts.Path, probe.ErrBlockDeviceWrite)
	}
	if err := tg.checkProbeDir(opts.ProbeDir); err != nil {
		return nil, err
	}
	rep := &FirstWriteReport{Path: opts.Path, Device: tg.device, BlockSize: opts.BlockSize, FileSize: opts.FileSize,
		Interval: opts.Interval, Runtime: opts.Runtime, Blocks: int(opts.FileSize / int64(opts.BlockSize))}
	opts.Progress.note(fmt.Sprintf("first-write: %s writes into a new %s file, at most %s (earlier once stable)",
		bytesize.Exact(int64(opts.BlockSize)), bytesize.Approx(opts.FileSize), formatSeconds(opts.Runtime)))
	err = tg.withScratch(opts.ProbeDir, opts.FileSize, true, func(scratch string) error {
		return rep.run(ctx, filepath.Join(scratch, "first-write"), opts)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted (%w)", context.Cause(ctx))
		}
		return nil, err
	}
	rep.judge()
	return rep, nil
}

// writer is the file written, O_DIRECT where the filesystem takes it.
type writer struct {
	fd     int
	direct bool
	buf    []byte
	n      uint64
}

func openWriter(path string, bs int) (*writer, error) {
	w := &writer{direct: true}
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) {
		// A filesystem without O_DIRECT: each write is followed by fdatasync instead, so
		// that it reaches the device before the next one, as the fsync probe's do.
		w.direct = false
		fd, err = unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	w.fd = fd
	// Page-aligned memory satisfies any O_DIRECT alignment; random data, so that a volume
	// that compresses or skips zeroes writes what it would write for a database.
	if w.buf, err = unix.Mmap(-1, 0, bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("allocating a %d-byte buffer: %w", bs, err)
	}
	for i := range w.buf {
		w.buf[i] = byte(rand.Uint32())
	}
	return w, nil
}

// write writes the block at off and says how long it took.
func (w *writer) write(off int64) (time.Duration, error) {
	// A counter in the block: no two writes carry the same data (deduplication).
	w.n++
	for i := 0; i < 8; i++ {
		w.buf[i] = byte(w.n >> (8 * i))
	}
	start := time.Now()
	n, err := unix.Pwrite(w.fd, w.buf, off)
	if err == nil && n < len(w.buf) {
		err = fmt.Errorf("short write at offset %d: %d of %d bytes", off, n, len(w.buf))
	}
	if err == nil && !w.direct {
		err = unix.Fdatasync(w.fd)
	}
	return time.Since(start), err
}

func (w *writer) close() error {
	_ = unix.Munmap(w.buf)
	return unix.Close(w.fd)
}

func (rep *FirstWriteReport) run(ctx context.Context, path string, opts FirstWriteOptions) (err error) {
	w, err := openWriter(path, opts.BlockSize)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.close()) }()
	rep.Direct = w.direct
	if !w.direct {
		rep.Warnings = append(rep.Warnings, "the filesystem refuses O_DIRECT: each write was followed by fdatasync, so the IOPS include the flushes")
	}
	order := rand.Perm(rep.Blocks) // fresh blocks, in the order they are written
	var written, lastIOPS atomic.Int64
	stop := opts.Progress.start("first-write", func(elapsed time.Duration) (float64, string) {
		return min(1, elapsed.Seconds()/opts.Runtime.Seconds()), fmt.Sprintf("%d IO/s, %d of %d blocks written once", lastIOPS.Load(), written.Load(), rep.Blocks)
	})
	defer func() { stop(err == nil) }()

	start := time.Now()
	deadline := start.Add(opts.Runtime)
	var cur WriteInterval
	var firstSum, rewriteSum time.Duration
	var firstN, rewriteN int
	var curFirst, curRewrite time.Duration
	end := start.Add(opts.Interval)
	for i := 0; ; i++ {
		now := time.Now()
		if now.After(end) || !now.Before(deadline) {
			cur.Elapsed = now.Sub(start) - cur.Start
			cur.IOPS = perSecond(float64(cur.Ops), cur.Elapsed)
			cur.FirstWriteMean = meanOf(curFirst, cur.FirstWrites)
			cur.RewriteMean = meanOf(curRewrite, cur.Ops-cur.FirstWrites)
			rep.Intervals = append(rep.Intervals, cur)
			lastIOPS.Store(int64(cur.IOPS))
			if rep.stable(rewritesOnly(firstSum, firstN, rewriteSum, rewriteN)) || !now.Before(deadline) {
				break
			}
			cur = WriteInterval{Start: now.Sub(start)}
			curFirst, curRewrite = 0, 0
			end = now.Add(opts.Interval)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fresh := rep.Written < rep.Blocks && (i%2 == 0 || rep.Written == 0)
		var block int
		if fresh {
			block = order[rep.Written]
		} else {
			block = order[rand.IntN(rep.Written)]
		}
		d, err := w.write(int64(block) * int64(opts.BlockSize))
		if err != nil {
			if errors.Is(err, unix.EINVAL) && w.direct {
				return fmt.Errorf("writing %s: %w (--bs %d may be below the filesystem's O_DIRECT alignment)", path, err, opts.BlockSize)
			}
			return fmt.Errorf("writing %s: %w", path, err)
		}
		cur.Ops++
		if fresh {
			rep.Written++
			written.Store(int64(rep.Written))
			cur.FirstWrites++
			curFirst += d
			firstSum += d
			firstN++
		} else {
			curRewrite += d
			rewriteSum += d
			rewriteN++
		}
	}
	rep.Elapsed = time.Since(start)
	rep.FirstMean, rep.RewriteMean = meanOf(firstSum, firstN), meanOf(rewriteSum, rewriteN)
	return nil
}

func meanOf(sum time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// rewritesOnly says whether stability must wait for the first writes to end: it need not
// when first writes have been no slower than rewrites so far (nothing to warm up).
func rewritesOnly(firstSum time.Duration, firstN int, rewriteSum time.Duration, rewriteN int) bool {
	if firstN == 0 || rewriteN == 0 {
		return true
	}
	return penalty(meanOf(firstSum, firstN), meanOf(rewriteSum, rewriteN)) >= penaltyFloor
}

// penalty is how much slower first writes are, in IOPS at one write at a time (1/mean
// latency): 1 - first-write IOPS / rewrite IOPS.
func penalty(first, rewrite time.Duration) float64 {
	if first <= 0 || rewrite <= 0 {
		return 0
	}
	return max(0, 1-float64(rewrite)/float64(first))
}

// stable: the last stableIntervals intervals' IOPS are each within ±stableSpread of their
// mean, and (rewritesOnly) they hold no first write.
func (rep *FirstWriteReport) stable(rewritesOnly bool) bool {
	n := len(rep.Intervals)
	if n < stableIntervals {
		return false
	}
	last := rep.Intervals[n-stableIntervals:]
	var sum float64
	for _, iv := range last {
		if (rewritesOnly && iv.FirstWrites > 0) || iv.Ops == 0 {
			return false
		}
		sum += iv.IOPS
	}
	mean := sum / float64(len(last))
	for _, iv := range last {
		if math.Abs(iv.IOPS-mean) > stableSpread*mean {
			return false
		}
	}
	return true
}

// judge sets the verdict and the penalty.
func (rep *FirstWriteReport) judge() {
	rep.Penalty = penalty(rep.FirstMean, rep.RewriteMean)
	rep.Verdict = WarmingUp
	if rep.stable(rep.Penalty >= penaltyFloor) {
		rep.Verdict = WarmedUp
		rep.WarmedUpAt = rep.Intervals[len(rep.Intervals)-stableIntervals].Start
	}
}

// ExitCode is 0: the profile measures and advises; it does not judge the disk for etcd.
func (rep *FirstWriteReport) ExitCode() int { return 0 }
