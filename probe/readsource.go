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
// block device, or a probe file that is written in full once before the first read.
type ReadSource struct {
	path       string
	fd         int // read descriptor, O_DIRECT (a probe file's is also open for writing); -1 until ready
	start, end int64
	align      int64

	// Preparation of a probe file; nil for a block device.
	prep *preparation
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

// preparation is the one-time writing of a read probe file: fallocate, fill with random
// data (never-written blocks read back "too good to be true" on SSDs and thin volumes),
// fdatasync, check that SEEK_HOLE finds no hole, then mark the header prepared.
type preparation struct {
	targetDir string
	dir       *probeDir
	size      int64
	minFree   int64
	chunk     []byte // aligned write buffer, held only while preparing
	rng       *rand.ChaCha8
	wfd       int // O_DIRECT write descriptor while writing; -1 otherwise
	off       int64
	reused    bool
}

// prepareChunk is how much of a probe file one preparation step writes at most: a step
// is bounded so that the target's other probes keep their schedule meanwhile.
const prepareChunk = 8 << 20

const prepareBlock = 1 << 20

// NewReadFile is the read probes' file in dir/.diskprobe/read.probe, of size bytes of
// data after the header. It is reused across restarts when its header says it was fully
// prepared for this size; otherwise it is rewritten by PrepareStep.
func NewReadFile(targetDir string, size, minFree, fallbackAlign int64) (*ReadSource, error) {
	if err := CheckDirectIO(targetDir); err != nil {
		return nil, err
	}
	dir, err := openProbeDir(targetDir)
	if err != nil {
		return nil, err
	}
	if fallbackAlign <= 0 {
		fallbackAlign = 512 // refined by statx once the file is open
	}
	return &ReadSource{
		path:  dir.filePath(readFileName),
		fd:    -1,
		start: HeaderSize,
		end:   HeaderSize + size,
		align: fallbackAlign,
		prep:  &preparation{targetDir: targetDir, dir: dir, size: HeaderSize + size, minFree: minFree, rng: newRNG(), wfd: -1},
	}, nil
}

// Path is the device or file read.
func (s *ReadSource) Path() string { return s.path }

// Ready reports whether reads may start.
func (s *ReadSource) Ready() bool { return s.fd >= 0 }

// readFileName is the read probes' file in the probe directory.
const readFileName = "read.probe"

// ready is nil when the read rounds may start, ErrNotPrepared while the file is prepared,
// and probeDir.ensure's error when the probe directory was swapped. It checks the file
// first (check), which a round makes untimed (fstat asks a FUSE or NFS server).
func (s *ReadSource) ready(r *round) error {
	if err := r.untimed(s.check); err != nil {
		return err
	}
	if s.fd < 0 {
		return ErrNotPrepared
	}
	return nil
}

// check sends a file that was deleted under us (target directory recreated), prepared or
// being prepared, back to the start of its preparation, and fails while the probe
// directory is not the one held.
func (s *ReadSource) check() error {
	if s.prep == nil {
		return nil
	}
	if err := s.prep.dir.ensure(); err != nil {
		return err
	}
	if s.fd >= 0 && !stillLinked(s.fd) {
		_ = unix.Close(s.fd)
		s.fd = -1
		s.abort()
		s.prep.reused = false
	}
	if s.prep.wfd >= 0 && !stillLinked(s.prep.wfd) {
		s.abort() // the file being prepared went with its directory: start again in the new one
	}
	return nil
}

// readBlock is one timed O_DIRECT pread(2) of len(buf) bytes at off: the operation of
// both read probes.
func (s *ReadSource) readBlock(r *round, buf []byte, off int64) (time.Duration, error) {
	read := [1]ioCall{{sys: sysPread, fd: s.fd, buf: buf, off: off}}
	d, _, err := r.timed(s.path, read[:], s.shortRead)
	return d, err
}

// Reused reports whether a prepared file from an earlier run was taken as it was.
func (s *ReadSource) Reused() bool { return s.prep != nil && s.prep.reused }

// Alignment is the O_DIRECT alignment of offsets and sizes (check's sweep skips block
// sizes below it).
func (s *ReadSource) Alignment() int64 { return s.align }

// Progress is the share of the file written so far.
func (s *ReadSource) Progress() float64 {
	if s.prep == nil || s.Ready() {
		return 1
	}
	return float64(s.prep.off) / float64(s.prep.size)
}

// Prepare writes (or reuses) the whole probe file before the first read, as commands do;
// the daemon's worker takes PrepareStep's steps between rounds instead. step, when set,
// sees each step's result.
func (s *ReadSource) Prepare(ctx context.Context, env *Env, step func(Result)) error {
	for {
		res, done, err := s.PrepareStep(ctx, env)
		if step != nil {
			step(res)
		}
		if err != nil || done {
			return err
		}
	}
}

// PrepareStep writes up to prepareChunk bytes of the probe file, each block waiting for
// the target's budget, and finishes the file when it is full.
func (s *ReadSource) PrepareStep(ctx context.Context, env *Env) (Result, bool, error) {
	var res Result
	if s.Ready() {
		return res, true, nil
	}
	p := s.prep
	// Checking the directory, opening, creating and allocating the file hang on a frozen
	// or dying filesystem as its writes do: they are the outstanding operation too.
	var ok bool
	var err error
	env.Inflight.Do(func() {
		if err = s.check(); err != nil || p.wfd >= 0 {
			return
		}
		if ok, err = s.reuse(); err == nil && !ok {
			err = s.begin(env.notice)
		}
	})
	if err != nil {
		s.abort()
		return res, false, err
	}
	if ok {
		return res, true, nil
	}
	if p.chunk == nil {
		chunk, err := alignedBuffer(prepareBlock)
		if err != nil {
			return res, false, err
		}
		p.chunk = chunk
	}
	for written := 0; written < prepareChunk && p.off < p.size; written += len(p.chunk) {
		if err := env.Budget.Wait(ctx, len(p.chunk)); err != nil {
			return res, false, err
		}
		p.rng.Read(p.chunk)
		var n int
		env.Inflight.Do(func() {
			err = ignoringEINTR(func() (err error) {
				n, err = unix.Pwrite(p.wfd, p.chunk[:min(int64(len(p.chunk)), p.size-p.off)], p.off)
				return err
			})
		})
		if err != nil {
			s.abort()
			return res, false, &os.PathError{Op: "write", Path: s.path, Err: err}
		}
		p.off += int64(n)
		res.Ops++
		res.Bytes += int64(n)
	}
	if p.off < p.size {
		return res, false, nil
	}
	env.Inflight.Do(func() { err = s.finish() })
	if err != nil {
		s.abort()
		return res, false, err
	}
	s.releaseChunk()
	return res, true, nil
}

// reuse takes a file that an earlier run prepared in full for this size.
func (s *ReadSource) reuse() (bool, error) {
	fd, h, err := s.prep.dir.openFile(readFileName)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !h.Prepared || h.Size != s.prep.size || h.Kind != "read" {
		_ = unix.Close(fd)
		return false, nil
	}
	if hole, err := seek(fd, unix.SEEK_HOLE); err != nil || hole < s.prep.size {
		_ = unix.Close(fd)
		return false, nil
	}
	if err := s.openForReads(fd); err != nil {
		return false, err
	}
	s.prep.reused = true
	return true, nil
}

func (s *ReadSource) begin(notice func(string)) error {
	p := s.prep
	if _, under, err := underFreeFloor(p.targetDir, p.minFree, p.size); err != nil {
		return err
	} else if under {
		return fmt.Errorf("%w: the %d MiB read probe file needs %d MiB free on top of the %d MiB floor",
			ErrLowFreeSpace, p.size>>20, p.size>>20, p.minFree>>20)
	}
	fd, err := p.dir.createDirectFile(notice, readFileName, Header{Kind: "read", Size: p.size})
	if err != nil {
		return err
	}
	p.wfd, p.off = fd, HeaderSize
	return nil
}

func (s *ReadSource) finish() error {
	p := s.prep
	if err := ignoringEINTR(func() error { return unix.Fdatasync(p.wfd) }); err != nil {
		return &os.PathError{Op: "fdatasync", Path: s.path, Err: err}
	}
	// A hole would be read back as zeros without touching the disk.
	hole, err := seek(p.wfd, unix.SEEK_HOLE)
	if err != nil {
		return &os.PathError{Op: "seek hole", Path: s.path, Err: err}
	}
	if hole < p.size {
		return fmt.Errorf("%s: hole at offset %d after writing the whole file; the filesystem did not keep the data", s.path, hole)
	}
	if err := writeHeader(p.wfd, s.path, Header{Kind: "read", Size: p.size, Prepared: true}); err != nil {
		return err
	}
	fd := p.wfd
	p.wfd = -1 // the reads' now
	return s.openForReads(fd)
}

func (s *ReadSource) abort() {
	if s.prep.wfd >= 0 {
		_ = unix.Close(s.prep.wfd)
		s.prep.wfd = -1
	}
	s.prep.off = 0
	s.releaseChunk()
}

// releaseChunk returns the preparation buffer: with many targets, 1 MiB each would
// dominate the exporter's memory for the rest of its life.
func (s *ReadSource) releaseChunk() {
	freeBuffer(s.prep.chunk)
	s.prep.chunk = nil
}

// openForReads makes fd, the prepared probe file, the reads' descriptor: O_DIRECT, with
// the alignment statx gives for it. It takes fd, and closes it on failure.
func (s *ReadSource) openForReads(fd int) error {
	if err := setDirect(fd, s.path); err != nil {
		_ = unix.Close(fd)
		return err
	}
	align, err := DirectIOAlignment(fd, s.path, s.align)
	if err != nil {
		_ = unix.Close(fd)
		return err
	}
	s.fd, s.align = fd, align
	return nil
}

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
	s.closeFile()
	if s.prep != nil {
		s.prep.dir.close()
	}
	return nil
}

// closeFile releases the file's descriptors and the preparation's buffer.
func (s *ReadSource) closeFile() {
	if s.prep != nil {
		s.abort()
	}
	if s.fd >= 0 {
		_ = unix.Close(s.fd)
		s.fd = -1
	}
}

// Remove closes the source and deletes its probe file. The daemon leaves its files for the
// next start (`cleanup` removes them); the benchmarks and the alert replay in tests/ remove theirs.
func (s *ReadSource) Remove() error {
	if s.prep == nil {
		return s.Close()
	}
	s.closeFile()
	err := s.prep.dir.removeFile(readFileName)
	_ = s.Close()
	return err
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
