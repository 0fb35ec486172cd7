package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ReadSource is what the read probes read, opened O_RDONLY|O_DIRECT: either a whole
// block device, or the read probe file, which the read probes' rounds fill in full once
// (filler) before the first read.
type ReadSource struct {
	path       string
	fd         int // read descriptor, O_DIRECT (the probe file's is the filler's, also open for writing); -1 until ready
	start, end int64
	align      int64

	// The read probe file's preparation; nil for a block device.
	fill *filler
}

// OpenDevice opens a block device for the read probes. It is opened read-only whatever
// the configuration says: the exporter never writes to a device.
func OpenDevice(path string, fallbackAlign int64) (*ReadSource, error) {
	fd, err := openFD(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, openDirectError(path, err)
	}
	size, err := seek(fd, unix.SEEK_END)
	if err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "size", Path: path, Err: err}
	}
	align, err := DirectIOAlignment(fd, path, fallbackAlign)
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return &ReadSource{path: path, fd: fd, start: 0, end: size, align: align}, nil
}

// DefaultReadFileSize is the size of the read probe file's data: randread's default
// file_size, and the size when no probe that reads the file sets one (seqread takes none).
const DefaultReadFileSize = 256 << 20

// NewReadFile is the read probes' file in dir/.diskprobe/read.probe, of size bytes of
// data after the header. It is reused across restarts when its header says it was fully
// prepared for this size; otherwise the read probes' rounds write it again (or Prepare).
func NewReadFile(targetDir string, size, minFree, fallbackAlign int64) (*ReadSource, error) {
	if err := CheckDirectIO(targetDir); err != nil {
		return nil, err
	}
	fill, err := newFiller(targetDir, readFileName, "read", HeaderSize+size, minFree, true)
	if err != nil {
		return nil, err
	}
	if fallbackAlign <= 0 {
		fallbackAlign = 512 // refined by statx once the file is open
	}
	s := &ReadSource{path: fill.file.path, fd: -1, start: HeaderSize, end: HeaderSize + size, align: fallbackAlign, fill: fill}
	fill.onReady = func(fd int) error {
		align, err := DirectIOAlignment(fd, s.path, s.align)
		if err != nil {
			return err
		}
		s.align = align
		return nil
	}
	return s, nil
}

// Path is the device or file read.
func (s *ReadSource) Path() string { return s.path }

// Ready reports whether reads may start.
func (s *ReadSource) Ready() bool { return s.fd >= 0 }

// readFileName is the read probes' file in the probe directory.
const readFileName = "read.probe"

// ready is nil when the round may read; otherwise the round takes a step of the file's
// preparation and returns filler.step's ErrNotPrepared or error (res counts the step's
// writes and says how far the file is).
func (s *ReadSource) ready(ctx context.Context, r *round, res *Result) error {
	if s.fill == nil {
		return nil
	}
	err := s.fill.step(ctx, r, res)
	s.follow()
	return err
}

// check is ready's look at the file alone, for a caller outside the read probes'
// rounds (RunQueue): a file deleted under us goes back to the start of its preparation,
// and a probe directory that is not the one held fails.
func (s *ReadSource) check() error {
	if s.fill == nil {
		return nil
	}
	err := s.fill.check()
	s.follow()
	return err
}

// follow makes the reads' descriptor the filler's file once it is prepared. It writes
// only a change: check's jobs run it side by side on one prepared file (RunQueue), as
// they read it, and the check alone must not race.
func (s *ReadSource) follow() {
	fd := -1
	if s.fill.prepared {
		fd = s.fill.file.fd
	}
	if s.fd != fd {
		s.fd = fd
	}
}

// readBlock is one timed O_DIRECT pread(2) of len(buf) bytes at off: the operation of
// both read probes.
func (s *ReadSource) readBlock(r *round, buf []byte, off int64) (time.Duration, error) {
	read := [1]ioCall{{sys: sysPread, fd: s.fd, buf: buf, off: off}}
	d, _, err := r.timed(s.path, read[:], s.shortRead)
	return d, err
}

// Reused reports whether a prepared file from an earlier run was taken as it was.
func (s *ReadSource) Reused() bool { return s.fill != nil && s.fill.reused }

// Alignment is the O_DIRECT alignment of offsets and sizes (check's sweep skips block
// sizes below it).
func (s *ReadSource) Alignment() int64 { return s.align }

// Prepare writes (or reuses) the whole probe file before the first read, as commands do,
// in rounds of its own that take the steps the daemon's read rounds take; step, when set,
// sees each round's result.
func (s *ReadSource) Prepare(ctx context.Context, env *Env, step func(Result)) error {
	p := &prober[*sourcePreparer]{kind: &sourcePreparer{s}}
	defer func() { _ = p.Close() }()
	for {
		res, err := p.Round(ctx, env)
		if step != nil {
			step(res)
		}
		if !errors.Is(err, ErrNotPrepared) {
			return err
		}
	}
}

// sourcePreparer is the kind whose rounds only prepare a read source (Prepare).
type sourcePreparer struct{ src *ReadSource }

func (p *sourcePreparer) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	err := p.src.ready(ctx, r, &res)
	return res, err
}

// closeFiles leaves the source to its owner.
func (p *sourcePreparer) closeFiles() error { return nil }

// randomOffset is a uniformly random offset at which a block of n bytes fits in the
// source, a multiple of n (itself a multiple of the O_DIRECT alignment), as fio aligns to
// its block size: with the alignment alone (512 B on most disks), seven 4 KiB reads in
// eight straddle two filesystem blocks and two physical sectors.
func (s *ReadSource) randomOffset(rng *rand.Rand, n int64) int64 {
	first := s.firstBlock(n)
	slots := (s.end-first-n)/n + 1
	if slots <= 1 {
		return first
	}
	return first + rng.Int64N(slots)*n
}

// firstBlock is the first offset of the data that is a multiple of n. A probe file's data
// starts after its 4 KiB header, where fio's file starts at 0: 1 MiB reads from 4096 +
// k MiB were 4-5 % slower at the median than from k MiB. Where the data holds no such
// block, reads start at the data.
func (s *ReadSource) firstBlock(n int64) int64 {
	first := (s.start + n - 1) / n * n
	if first+n > s.end {
		return s.start
	}
	return first
}

// Close releases the descriptors and buffers; the file stays for the next run to reuse.
func (s *ReadSource) Close() error {
	if s.fill != nil {
		s.fill.close()
	} else if s.fd >= 0 {
		_ = unix.Close(s.fd)
	}
	s.fd = -1
	return nil
}

// Remove closes the source and deletes its probe file. The daemon leaves its files for the
// next start (`cleanup` removes them); the benchmarks and the alert replay in tests/ remove theirs.
func (s *ReadSource) Remove() error {
	if s.fill == nil {
		return s.Close()
	}
	s.fd = -1
	return s.fill.remove()
}

// shortRead explains a read that returned fewer bytes than asked. The usual cause is a
// device or file that shrank under us (a disk that dropped off the bus reads as capacity
// 0): the message says so with the size now and at start, and leaves the random offset
// out, so that one condition gives one message round after round (and is logged once).
func (s *ReadSource) shortRead(n, want int) error {
	if size, err := seek(s.fd, unix.SEEK_END); err == nil && size < s.end {
		return fmt.Errorf("short read: the device or file is now %d bytes, %d at start: it shrank or went away", size, s.end)
	}
	return fmt.Errorf("short read: %d of %d bytes", n, want)
}

func (s *ReadSource) checkBlockSize(probe string, n int64) error {
	if n%s.align != 0 {
		return fmt.Errorf("%s: %s block_size %d is not a multiple of the O_DIRECT alignment %d of %s", probe, probe, n, s.align, s.path)
	}
	if n > s.end-s.start {
		return fmt.Errorf("%s: block_size %d is larger than %s (%d bytes)", probe, n, s.path, s.end-s.start)
	}
	return nil
}
