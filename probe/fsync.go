package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FsyncOptions configure the etcd-WAL-like probe.
type FsyncOptions struct {
	Dir       string // the target directory; the file lives in Dir/.diskprobe
	FileName  string // default "fsync.probe"
	Ops       int    // write+fdatasync pairs per round
	BlockSize int    // bytes per write (etcd's WAL entries average ~2300 B)
	FileSize  int64  // preallocated size; a new file is cut when it is full, like a WAL segment
	MinFree   int64  // free-space floor in bytes; 0 disables it
}

// Fsync writes block_size bytes of fresh random data at the end of a fallocated file and
// fdatasyncs after each write, as etcd's WAL does. The write and the fdatasync are timed
// separately: fio's `sync` percentiles and etcd's wal_fsync time the sync alone, and a
// slow write must not hide inside it.
type Fsync struct {
	opts FsyncOptions
	path string
	f    *os.File
	fd   int
	off  int64
	buf  []byte
	rng  *rand.ChaCha8
	settler
}

// NewFsync checks the probe directory; the file itself is created by the first round.
func NewFsync(opts FsyncOptions) (*Fsync, error) {
	if opts.FileName == "" {
		opts.FileName = "fsync.probe"
	}
	if opts.BlockSize <= 0 || opts.Ops <= 0 || opts.FileSize < HeaderSize+int64(opts.BlockSize) {
		return nil, fmt.Errorf("fsync probe: invalid options %+v", opts)
	}
	dir, err := EnsureDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	return &Fsync{
		opts: opts,
		path: filepath.Join(dir, opts.FileName),
		fd:   -1,
		buf:  make([]byte, opts.BlockSize),
		rng:  newRNG(),
	}, nil
}

// Round does opts.Ops write+fdatasync pairs.
func (p *Fsync) Round(ctx context.Context, env *Env) (Result, error) {
	return p.runRound(ctx, env, p.round)
}

func (p *Fsync) round(ctx context.Context, env *Env) (Result, error) {
	var res Result
	if err := checkFreeFloor(env.Inflight, p.opts.Dir, p.opts.MinFree, 0); err != nil {
		return res, err
	}
	if p.f != nil && !stillLinked(env.Inflight, p.fd) {
		_ = p.Close() // the directory was replaced: start a new file in the new one
	}
	for range p.opts.Ops {
		if err := p.budget(ctx, env, len(p.buf)); err != nil {
			return res, err
		}
		if err := p.ensureRoom(env); err != nil {
			return res, err
		}
		if err := p.writeAndSync(env, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// writeAndSync does one operation. The timed region holds nothing but the two system
// calls between the clock reads (ignoringEINTR says how a retried call is timed); the
// data is made before the clock starts, and the thread's CPU wait read outside it. It is
// not two settler.timed calls: the write's end stamp is the fdatasync's start, and
// between two calls of timed the settler could yield.
func (p *Fsync) writeAndSync(env *Env, res *Result) error {
	p.rng.Read(p.buf)
	p.settle()
	p.cpu.begin()
	var n int
	var t1, t2 time.Time
	t0 := time.Now()
	env.Inflight.begin(t0)
	err := ignoringEINTR(func() (err error) {
		n, err = unix.Pwrite(p.fd, p.buf, p.off)
		t1 = time.Now()
		return err
	})
	if err == nil && n != len(p.buf) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(p.buf))
	}
	if err != nil {
		env.Inflight.end()
		return &os.PathError{Op: "write", Path: p.path, Err: err}
	}
	env.Inflight.begin(t1)
	err = ignoringEINTR(func() error {
		err := unix.Fdatasync(p.fd)
		t2 = time.Now()
		return err
	})
	env.Inflight.end()
	// A failed fdatasync is observed too, in the same histogram, as etcd observes
	// wal_fsync before it returns the error: one that failed after 30 s is the sick disk
	// the histogram is there to show, and a separate series would hide it from every
	// dashboard and alert built on this one. The write and the load it put on the disk
	// count as well.
	env.observe(Sample{Phase: PhaseWrite, Duration: t1.Sub(t0)})
	env.observe(Sample{Phase: PhaseFdatasync, Duration: t2.Sub(t1)})
	res.Ops++
	res.Bytes += int64(n)
	res.IO += t2.Sub(t0)
	if err != nil {
		// After a failed fdatasync the file's state is unknown: the kernel may have
		// dropped the dirty pages and cleared the error, so a second fdatasync would
		// succeed over data that never reached the disk (PostgreSQL's "fsyncgate").
		// etcd treats the error as fatal for its WAL file; the probe abandons its file,
		// and the next round starts on a fresh one (ensureRoom replaces it).
		_ = p.Close()
		return &os.PathError{Op: "fdatasync", Path: p.path, Err: err}
	}
	p.off += int64(n)
	return nil
}

// ensureRoom opens the file on first use and cuts a new one when the next block would
// not fit. A fresh file at start-up means every write lands on preallocated, never
// written blocks, as etcd's do and as fio's recipe does.
func (p *Fsync) ensureRoom(env *Env) error {
	if p.f != nil && p.off+int64(len(p.buf)) <= p.opts.FileSize {
		return nil
	}
	// Cutting a file (mkdir, create, fallocate, fdatasync) hangs on a frozen or dying
	// filesystem just as a write does: it is the outstanding operation, and its age shows.
	// Its waits are not a timed call's.
	p.cpu.pause()
	env.Inflight.begin(timeNow())
	defer env.Inflight.end()
	if p.f != nil {
		_ = p.f.Close()
		p.f, p.fd = nil, -1
	}
	if _, err := EnsureDir(p.opts.Dir); err != nil {
		return err
	}
	f, err := createProbeFile(env, p.path, Header{Kind: "fsync", Size: p.opts.FileSize})
	if err != nil {
		return err
	}
	p.f, p.fd, p.off = f, int(f.Fd()), HeaderSize
	return nil
}

// Close closes the file; it stays on disk for the next start to replace.
func (p *Fsync) Close() error {
	p.cpu.closeFDs()
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f, p.fd = nil, -1
	return err
}

// Remove closes and deletes the probe file (used by the one-shot check).
func (p *Fsync) Remove() error {
	_ = p.Close()
	return removeOwn(p.path)
}

func newRNG() *rand.ChaCha8 {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	return rand.NewChaCha8(seed)
}
