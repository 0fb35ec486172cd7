package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/answer"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// target is PATH as every profile sees it: a directory, or a block device that is only
// ever read.
type target struct {
	path     string
	isDevice bool
	device   *Device // nil when the device could not be resolved
	align    int64   // the device's logical block size, the O_DIRECT fallback alignment
	noticed  []string
}

// notice keeps, once, what a probe did differently on this filesystem (no fallocate),
// for the report's warnings.
func (t *target) notice(msg string) {
	if !slices.Contains(t.noticed, msg) {
		t.noticed = append(t.noticed, msg)
	}
}

// openTarget looks at PATH (and waits for PATH and probeDir to answer first: see answers).
func openTarget(ctx context.Context, path, probeDir string, paths device.Paths) (*target, error) {
	if err := answers(ctx, path, probeDir); err != nil {
		return nil, err
	}
	typ, err := inspect.PathType(path)
	if err != nil {
		return nil, err
	}
	t := &target{path: path, isDevice: typ == config.TypeBlockDevice}
	if info, err := paths.Resolve(path); err == nil {
		t.device = &Device{Name: info.Name, Disk: info.Disk, Model: info.Model, Serial: info.Serial, Rotational: info.Rotational}
		t.align = info.LogicalBlockSize
	}
	return t, nil
}

// answers waits, at most answer.CommandWait, for the paths check measures to answer stat and
// statfs (their errors are reported by the calls that follow). A hung mount would
// otherwise leave check hanging before it printed anything.
func answers(ctx context.Context, paths ...string) error {
	var calls answer.Paths
	for _, path := range paths {
		if path == "" {
			continue
		}
		ok := calls.Call(ctx, path, answer.CommandWait, func() {
			var st unix.Stat_t
			var fs unix.Statfs_t
			if unix.Stat(path, &st) == nil {
				_ = unix.Statfs(path, &fs)
			}
		})
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("interrupted (%w)", context.Cause(ctx))
		case !ok:
			return &answer.NotAnsweredError{Path: path, Wait: answer.CommandWait}
		}
	}
	return nil
}

// checkProbeDir validates --probe-dir for this target.
func (t *target) checkProbeDir(probeDir string) error {
	if probeDir == "" {
		return nil
	}
	typ := config.TypeDirectory
	if t.isDevice {
		typ = config.TypeBlockDevice
	}
	if err := inspect.ProbeDir(typ, t.path, probeDir); err != nil {
		return fmt.Errorf("--probe-dir: %w", err)
	}
	return nil
}

// withScratch runs fn in a scratch directory of its own inside PATH (or probeDir) after
// checking that it is on a disk (syncs: fn fdatasyncs, else it reads with O_DIRECT) and
// that need bytes (plus a margin) are free; the directory is removed whatever
// happens, Ctrl-C included.
func (t *target) withScratch(probeDir string, need int64, syncs bool, fn func(scratch string) error) (err error) {
	path := t.path
	if probeDir != "" {
		path = probeDir
	}
	// A memory filesystem would pass any threshold and mean nothing.
	if err := probe.CheckOnDisk(path, syncs, !syncs); err != nil {
		return err
	}
	need += freeSpaceMargin
	free, err := probe.FreeBytes(path)
	if err != nil {
		return err
	}
	if free < need {
		return fmt.Errorf("not enough free space on %s: %s free, the check needs %s (its files plus a %s margin)",
			path, bytesize.Approx(free), bytesize.Approx(need), bytesize.Approx(freeSpaceMargin))
	}
	scratch, err := os.MkdirTemp(path, ScratchPrefix)
	if err != nil {
		return fmt.Errorf("cannot create the check's scratch directory in %s: %w", path, err)
	}
	defer func() {
		if rmErr := os.RemoveAll(scratch); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", scratch, rmErr))
		}
	}()
	return fn(scratch)
}

// withReadSource runs fn on what the read jobs read: the whole device, opened read-only,
// or a probe file of size bytes in a scratch directory, written in full with random data
// and checked for holes first (never-written blocks read back "too good to be true").
func (t *target) withReadSource(ctx context.Context, probeDir string, size int64, progress *Progress, fn func(*probe.ReadSource) error) error {
	if t.isDevice {
		src, err := probe.OpenDevice(t.path, t.align)
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		return fn(src)
	}
	return t.withScratch(probeDir, probe.HeaderSize+size, false, func(scratch string) error {
		src, err := probe.NewReadFile(scratch, size, 0, t.align)
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		if err := prepareFile(ctx, src, size, progress, t.notice); err != nil {
			return err
		}
		return fn(src)
	})
}

// prepareFile writes the read file in full (random data, no holes) before the first read.
func prepareFile(ctx context.Context, src *probe.ReadSource, size int64, progress *Progress, notice func(string)) error {
	var written atomic.Int64
	total := float64(probe.HeaderSize + size)
	stop := progress.start("prepare", func(time.Duration) (float64, string) {
		n := written.Load()
		return float64(n) / total, fmt.Sprintf("%s/%s of the read file", bytesize.Approx(n), bytesize.Approx(size))
	})
	err := src.Prepare(ctx, &probe.Env{Budget: probe.Unlimited, Notice: notice}, func(res probe.Result) { written.Add(res.Bytes) })
	stop(err == nil)
	if err != nil {
		return fmt.Errorf("preparing the read file: %w", err)
	}
	return nil
}

// deviceSize is the size of a block device, read without opening it for writing.
func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	return f.Seek(0, io.SeekEnd)
}
