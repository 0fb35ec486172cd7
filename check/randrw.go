package check

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Defaults of the randrw profile: fio's `rw=randrw bs=128k direct=1` job files.
const (
	DefaultRandRWBlock   = 128 * config.KiB
	DefaultRWMixRead     = 50
	DefaultRandRWRuntime = 10 * time.Second
)

// RandRWOptions say what a randrw job does.
type RandRWOptions struct {
	Path      string
	ProbeDir  string
	BlockSize int
	Depth     int
	ReadMix   int // percentage of reads
	Runtime   time.Duration
	FileSize  int64
	Paths     device.Paths
	Progress  *Progress
}

// RandRWReport is what a randrw job measured.
type RandRWReport struct {
	Path        string
	Device      *Device
	Source      Source
	BlockSize   int
	Depth       int
	ReadMix     int
	Elapsed     time.Duration
	Read, Write Direction
	Submitting  time.Duration // inside io_submit: see probe.QueueResult
	// Reference is the same mix at queue depth 1, run first for a fifth of the time when
	// Depth > 1: what the queue added. Nil at depth 1.
	Reference *Reference
	// Gain is the deep queue's steady IOPS over depth 1's (first rounds left out); 0 when
	// not measured. Flat: at most ceilingGrowth, with the queue really kept.
	Gain float64
	Flat bool
}

// Reference is a short run of a job at queue depth 1.
type Reference struct {
	Ops        int
	Elapsed    time.Duration
	IOPS       float64
	Submitting time.Duration
}

// referenceShare is the share of --runtime the depth-1 reference takes, on top of it.
const referenceShare = 5

// Direction is one direction of a mixed job, as fio reports its read and write sides.
type Direction struct {
	Ops            int
	Bytes          int64
	IOPS           float64
	BytesPerSecond float64
	Latency        Latency
}

// RandRW runs random mixed I/O on PATH. On a directory it writes only into its own read
// file, in a scratch directory removed before RandRW returns whatever happens. On a block
// device it only reads, and only when asked to (--rwmixread=100): nothing is ever
// written to a block device.
func RandRW(ctx context.Context, opts RandRWOptions) (*RandRWReport, error) {
	if err := validateJob(opts.Depth, opts.Runtime, opts.FileSize); err != nil {
		return nil, err
	}
	if opts.ReadMix < 0 || opts.ReadMix > 100 {
		return nil, fmt.Errorf("--rwmixread %d: a percentage, 0 to 100", opts.ReadMix)
	}
	if opts.BlockSize < 512 || opts.BlockSize%512 != 0 || opts.BlockSize > SweepMaxBlock {
		return nil, fmt.Errorf("--bs %d: a multiple of 512 B up to %s", opts.BlockSize, config.FormatSize(SweepMaxBlock))
	}
	tg, err := openTarget(ctx, opts.Path, opts.ProbeDir, opts.Paths)
	if err != nil {
		return nil, err
	}
	if tg.isDevice && opts.ReadMix < 100 {
		return nil, fmt.Errorf("%s is a block device and randrw writes: %w; run randrw on a directory of the filesystem on it, or give --rwmixread=100 to only read it", opts.Path, probe.ErrBlockDeviceWrite)
	}
	if err := tg.checkProbeDir(opts.ProbeDir); err != nil {
		return nil, err
	}
	if !tg.isDevice && int64(opts.BlockSize) > opts.FileSize {
		return nil, fmt.Errorf("--bs %d is larger than --file-size %d", opts.BlockSize, opts.FileSize)
	}
	rep := &RandRWReport{Path: opts.Path, Device: tg.device, BlockSize: opts.BlockSize, Depth: opts.Depth, ReadMix: opts.ReadMix}
	err = tg.withReadSource(ctx, opts.ProbeDir, opts.FileSize, opts.Progress, func(src *probe.ReadSource) error {
		rep.Source = Source{Type: "file", Bytes: src.Size()}
		if tg.isDevice {
			rep.Source.Type = "device"
		}
		return rep.run(ctx, src, opts)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted (%w)", context.Cause(ctx))
		}
		return nil, err
	}
	return rep, nil
}

func (rep *RandRWReport) run(ctx context.Context, src *probe.ReadSource, opts RandRWOptions) error {
	if opts.Depth > 1 {
		runtime := opts.Runtime / referenceShare
		stop := opts.Progress.start("randrw", func(elapsed time.Duration) (float64, string) {
			return min(1, elapsed.Seconds()/runtime.Seconds()), fmt.Sprintf("%s QD1 %d%% reads (the reference)", bytesize.Exact(int64(opts.BlockSize)), opts.ReadMix)
		})
		res, err := probe.RunQueue(ctx, src, probe.QueueJob{BlockSize: opts.BlockSize, Depth: 1, Random: true, ReadMix: opts.ReadMix, Runtime: runtime},
			&probe.Env{Budget: probe.Unlimited})
		stop(err == nil)
		if err != nil {
			return fmt.Errorf("randrw at queue depth 1: %w", err)
		}
		ops := res.Read.Ops + res.Write.Ops
		rep.Reference = &Reference{Ops: ops, Elapsed: res.Elapsed, IOPS: perSecond(float64(ops), res.Elapsed), Submitting: res.Submitting}
	}
	stop := opts.Progress.start("randrw", func(elapsed time.Duration) (float64, string) {
		return min(1, elapsed.Seconds()/opts.Runtime.Seconds()), fmt.Sprintf("%s QD%d %d%% reads", bytesize.Exact(int64(opts.BlockSize)), opts.Depth, opts.ReadMix)
	})
	res, err := probe.RunQueue(ctx, src, probe.QueueJob{BlockSize: opts.BlockSize, Depth: opts.Depth, Random: true, ReadMix: opts.ReadMix, Runtime: opts.Runtime},
		&probe.Env{Budget: probe.Unlimited})
	stop(err == nil)
	if err != nil {
		if errors.Is(err, probe.ErrBlockDeviceWrite) {
			return err
		}
		return fmt.Errorf("randrw: %w", err)
	}
	rep.Elapsed = res.Elapsed
	rep.Read = direction(res.Read, res.Elapsed)
	rep.Write = direction(res.Write, res.Elapsed)
	rep.Submitting = res.Submitting
	rep.judge()
	return nil
}

// judge applies the sweep's queue-depth test, the one part of its rule one job can apply.
// It cannot compare block sizes or patterns, so a flat job may be a ceiling or a device
// that reached its own limit at depth 1 (128 KiB randrw on a RAM-backed loop device here
// gained 1.3×: RAM behind a block layer, on 2 shared vCPUs): the summary says so and points
// to the sweep.
func (rep *RandRWReport) judge() {
	ref := rep.Reference
	if ref == nil || ref.Ops < 2 {
		return
	}
	deep := perSecond(float64(max(0, rep.Read.Ops+rep.Write.Ops-rep.Depth)), rep.Elapsed)
	shallow := perSecond(float64(ref.Ops-1), ref.Elapsed)
	if shallow <= 0 {
		return
	}
	rep.Gain = deep / shallow
	rep.Flat = rep.Gain <= ceilingGrowth && queued(rep.Submitting, rep.Elapsed)
}

func direction(d probe.DirectionResult, elapsed time.Duration) Direction {
	return Direction{Ops: d.Ops, Bytes: d.Bytes, IOPS: perSecond(float64(d.Ops), elapsed),
		BytesPerSecond: perSecond(float64(d.Bytes), elapsed), Latency: Summarize(d.Lat)}
}

// ExitCode is 0: randrw measures, it does not judge.
func (rep *RandRWReport) ExitCode() int { return 0 }
