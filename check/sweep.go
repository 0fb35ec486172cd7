package check

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/internal/latency"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Defaults of the sweep and randrw profiles.
const (
	// DefaultIODepth is the `iops` tool's 32 threads and the usual fio iodepth for
	// "what can this volume do at most".
	DefaultIODepth = 32
	// DefaultCellRuntime keeps a full sweep (18 sizes × 2 patterns × 2 depths) near a
	// minute and a quarter; on this machine's loop devices p50 and IO/s of a 1 s cell
	// moved by a few percent from run to run.
	DefaultCellRuntime = time.Second
	// DefaultJobFileSize is the prepared file read (and written by randrw) on a
	// directory: 1 GiB is larger than the caches of most volumes' controllers, and
	// holds 16 of the sweep's largest blocks.
	DefaultJobFileSize = 1 * config.GiB
	// SweepMaxBlock is the sweep's largest block.
	SweepMaxBlock = 64 * config.MiB
	// MaxIODepth bounds --iodepth: each unit of depth is an OS thread.
	MaxIODepth = 256
)

// SweepOptions say what a sweep measures.
type SweepOptions struct {
	Path     string
	ProbeDir string        // where the read file goes instead of Path (same filesystem)
	Depth    int           // the deep queue; depth 1 is always measured
	Runtime  time.Duration // per cell
	FileSize int64         // directory: bytes of the prepared read file
	Paths    device.Paths
	Progress *Progress
}

// Pattern is the order of a job's offsets.
type Pattern string

// The patterns a sweep runs each block size in.
const (
	Random     Pattern = "random"
	Sequential Pattern = "sequential"
)

// Cell is one job of the sweep: reads of one block size in one pattern at one depth.
type Cell struct {
	BlockSize      int
	Pattern        Pattern
	Depth          int
	Ops            int
	Bytes          int64
	Elapsed        time.Duration
	IOPS           float64
	BytesPerSecond float64
	P50, P99       time.Duration
	Submitting     time.Duration // inside io_submit: see probe.QueueResult
}

// SweepReport is what a sweep measured.
type SweepReport struct {
	Path       string
	Device     *Device
	Source     Source
	Runtime    time.Duration // per cell
	Depth      int
	Advertised time.Duration // cells × runtime, said before the first read
	Elapsed    time.Duration // the cells' wall time, the read file's preparation apart
	Cells      []Cell
	Ceiling    *Ceiling // nil: no ceiling shown (see ceiling)
}

// Source is what the read jobs read.
type Source struct {
	Type  string // "device" (read-only) or "file" (a prepared probe file)
	Bytes int64  // bytes addressed
}

// SweepSizes are the block sizes of a sweep: powers of two from the logical block size
// (at least 512 B) to SweepMaxBlock, those that fit in size bytes.
func SweepSizes(logical, size int64) []int {
	var out []int
	for bs := max(512, logical); bs <= SweepMaxBlock && bs <= size; bs *= 2 {
		out = append(out, int(bs))
	}
	return out
}

// sweepCells lists the cells in the order they are shown: by size, then random before
// sequential, then depth 1 before the deep queue. They run in the reverse order.
func sweepCells(sizes []int, depth int) []Cell {
	depths := []int{1}
	if depth > 1 {
		depths = append(depths, depth)
	}
	var cells []Cell
	for _, bs := range sizes {
		for _, p := range []Pattern{Random, Sequential} {
			for _, d := range depths {
				cells = append(cells, Cell{BlockSize: bs, Pattern: p, Depth: d})
			}
		}
	}
	return cells
}

// Sweep reads PATH in every cell of the sweep. On a directory it first writes its read
// file in a scratch directory, removed before Sweep returns whatever happens (Ctrl-C
// included); a block device is opened read-only.
func Sweep(ctx context.Context, opts SweepOptions) (*SweepReport, error) {
	if err := validateJob(opts.Depth, opts.Runtime, opts.FileSize); err != nil {
		return nil, err
	}
	tg, err := openTarget(ctx, opts.Path, opts.ProbeDir, opts.Paths)
	if err != nil {
		return nil, err
	}
	if err := tg.checkProbeDir(opts.ProbeDir); err != nil {
		return nil, err
	}
	logical := max(512, tg.align)
	size := opts.FileSize
	if tg.isDevice {
		if size, err = deviceSize(opts.Path); err != nil {
			return nil, err
		}
	}
	cells := sweepCells(SweepSizes(logical, size), opts.Depth)
	if len(cells) == 0 {
		return nil, fmt.Errorf("%s holds %d bytes, less than one %d-byte block", opts.Path, size, logical)
	}
	rep := &SweepReport{Path: opts.Path, Device: tg.device, Runtime: opts.Runtime, Depth: opts.Depth,
		Advertised: time.Duration(len(cells)) * opts.Runtime}
	what := "reads of the whole device, opened read-only"
	if !tg.isDevice {
		what = fmt.Sprintf("reads of a %s file written first", bytesize.Approx(opts.FileSize))
	}
	opts.Progress.note(fmt.Sprintf("sweep: %d cells of %s, %s: about %s", len(cells), opts.Runtime, what, formatSeconds(rep.Advertised)))

	err = tg.withReadSource(ctx, opts.ProbeDir, opts.FileSize, opts.Progress, func(src *probe.ReadSource) error {
		rep.Source = Source{Type: "file", Bytes: src.Size()}
		if tg.isDevice {
			rep.Source.Type = "device"
		}
		return rep.run(ctx, src, cells, opts.Progress)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted (%w)", context.Cause(ctx))
		}
		return nil, err
	}
	return rep, nil
}

func (rep *SweepReport) run(ctx context.Context, src *probe.ReadSource, cells []Cell, progress *Progress) error {
	var done atomic.Int64
	var current atomic.Pointer[Cell]
	var cellStart, cellRuntime atomic.Int64
	stop := progress.start("sweep", func(time.Duration) (float64, string) {
		n := done.Load()
		f := float64(n) / float64(len(cells))
		c := current.Load()
		if c == nil {
			return f, fmt.Sprintf("%d/%d cells", n, len(cells))
		}
		in := time.Since(time.Unix(0, cellStart.Load()))
		f += min(1, in.Seconds()/time.Duration(cellRuntime.Load()).Seconds()) / float64(len(cells))
		return f, fmt.Sprintf("%d/%d: %s %s QD%d", n+1, len(cells), bytesize.Exact(int64(c.BlockSize)), c.Pattern, c.Depth)
	})
	// The largest blocks run first: a cell whose first round of I/O outlasts its runtime
	// (32 × 64 MiB in flight) overruns it, and the smaller cells after it share what is
	// left of the advertised time. They need little: their I/Os take microseconds.
	// 1 % of the advertised time is kept for what each cell costs around its I/O
	// (io_setup, io_destroy, buffers): without it, 72 cells of 1 s took 72.04 s.
	start := time.Now()
	budget := rep.Advertised - rep.Advertised/100
	for i := len(cells) - 1; i >= 0; i-- {
		c := &cells[i]
		runtime := max(rep.Runtime/2, min(rep.Runtime, (budget-time.Since(start))/time.Duration(i+1)))
		if int64(c.BlockSize)%src.Alignment() != 0 {
			// A device whose O_DIRECT alignment is above its logical block size.
			continue
		}
		cellStart.Store(time.Now().UnixNano())
		cellRuntime.Store(int64(runtime))
		current.Store(c)
		res, err := probe.RunQueue(ctx, src, probe.QueueJob{BlockSize: c.BlockSize, Depth: c.Depth, Random: c.Pattern == Random, ReadMix: 100, Runtime: runtime},
			&probe.Env{Budget: probe.Unlimited})
		if err != nil {
			stop(false)
			return fmt.Errorf("%s %s reads at queue depth %d: %w", bytesize.Exact(int64(c.BlockSize)), c.Pattern, c.Depth, err)
		}
		c.fill(res.Read, res.Elapsed)
		c.Submitting = res.Submitting
		done.Add(1)
	}
	for _, c := range cells {
		if c.Elapsed > 0 {
			rep.Cells = append(rep.Cells, c)
		}
	}
	rep.Elapsed = time.Since(start)
	rep.Ceiling = rep.ceiling()
	current.Store(nil)
	stop(true)
	return nil
}

func (c *Cell) fill(d probe.DirectionResult, elapsed time.Duration) {
	c.Ops, c.Bytes, c.Elapsed = d.Ops, d.Bytes, elapsed
	c.IOPS = perSecond(float64(d.Ops), elapsed)
	c.BytesPerSecond = perSecond(float64(d.Bytes), elapsed)
	sorted := latency.Sorted(d.Lat)
	c.P50, c.P99 = latency.Percentile(sorted, 50), latency.Percentile(sorted, 99)
}

// validateJob checks the flags every queue-depth profile shares.
func validateJob(depth int, runtime time.Duration, fileSize int64) error {
	if depth < 1 || depth > MaxIODepth {
		return fmt.Errorf("--iodepth %d: between 1 and %d", depth, MaxIODepth)
	}
	if runtime <= 0 {
		return fmt.Errorf("--runtime %s: must be positive", runtime)
	}
	if fileSize < 1*config.MiB || fileSize%(1*config.MiB) != 0 {
		return fmt.Errorf("--file-size %d: a whole number of MiB, at least 1MiB", fileSize)
	}
	return nil
}

// ExitCode is 0: a sweep measures, it does not judge.
func (rep *SweepReport) ExitCode() int { return 0 }
