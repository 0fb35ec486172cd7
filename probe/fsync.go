package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

func init() {
	register(&Kind{
		Name: "fsync", Order: 10, Writes: true, DefaultOn: OnDirectories,
		Keys:         []string{"interval", "ops", "block_size", "file_size"},
		Defaults:     Settings{Interval: 15 * time.Second, Ops: 20, BlockSize: 2300, FileSize: 64 << 20},
		LargestBlock: blockSize,
		Check: func(s *Settings) (string, string) {
			if s.FileSize < HeaderSize+s.BlockSize {
				return "file_size", fmt.Sprintf("must hold the %s header and at least one block_size (%s), got %s", bytesize.Config(HeaderSize), bytesize.Config(s.BlockSize), bytesize.Config(s.FileSize))
			}
			return "", ""
		},
		Histograms: []Histogram{
			{Phase: PhaseFdatasync, Name: "fdatasync_duration_seconds", Help: "Time of each fdatasync(2) of the fsync probe, the call etcd's wal_fsync and fio's sync percentiles time.", Buckets: LatencyBuckets},
			// No rule reads the write call's distribution, only its mean (a write into the
			// page cache is microseconds; a slow one shows in the mean and, with native
			// histograms, in full): native buckets only, three series per target, not seventeen.
			{Phase: PhaseWrite, Name: "write_duration_seconds", Help: "Time of each write(2) of the fsync probe, before its fdatasync (native buckets only)."},
		},
		New: func(site Site, s Settings) (Prober, error) {
			return NewFsync(FsyncOptions{Dir: site.Dir, Ops: s.Ops, BlockSize: int(s.BlockSize), FileSize: s.FileSize, MinFree: site.MinFree})
		},
	})
}

// FsyncOptions configure the etcd-WAL-like probe.
type FsyncOptions struct {
	Dir       string // the target directory; the file lives in Dir/.diskprobe
	Ops       int    // write+fdatasync pairs per round
	BlockSize int    // bytes per write (etcd's WAL entries average ~2300 B)
	FileSize  int64  // preallocated size; a new file is cut when it is full, like a WAL segment
	MinFree   int64  // free-space floor in bytes; 0 disables it
}

// Fsync writes block_size bytes of fresh random data at the end of a fallocated file and
// fdatasyncs after each write, as etcd's WAL does. The write and the fdatasync are timed
// separately: fio's `sync` percentiles and etcd's wal_fsync time the sync alone, and a
// slow write must not hide inside it.
type Fsync struct{ prober[*fsyncWriter] }

// fsyncWriter is the fsync probe's kind: its file and where the next block goes.
type fsyncWriter struct {
	opts  FsyncOptions
	file  ownFile
	off   int64
	buf   []byte
	rng   *rand.ChaCha8
	calls [2]ioCall // the write and its fdatasync
}

// fsyncFileName is the fsync probe's file in the probe directory.
const fsyncFileName = "fsync.probe"

// NewFsync checks the probe directory; the file itself is created by the first round.
func NewFsync(opts FsyncOptions) (*Fsync, error) {
	if opts.BlockSize <= 0 || opts.Ops <= 0 || opts.FileSize < HeaderSize+int64(opts.BlockSize) {
		return nil, fmt.Errorf("fsync probe: invalid options %+v", opts)
	}
	file, err := openOwnFile(opts.Dir, fsyncFileName)
	if err != nil {
		return nil, err
	}
	return &Fsync{prober[*fsyncWriter]{kind: &fsyncWriter{
		opts: opts,
		file: file,
		buf:  make([]byte, opts.BlockSize),
		rng:  newRNG(),
	}}}, nil
}

// run does opts.Ops write+fdatasync pairs.
func (p *fsyncWriter) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := r.untimed(p.check); err != nil {
		return res, err
	}
	for range p.opts.Ops {
		if err := r.waitBudget(ctx, len(p.buf)); err != nil {
			return res, err
		}
		if p.file.fd < 0 || p.off+int64(len(p.buf)) > p.opts.FileSize {
			if err := r.untimed(func() error { return p.cutFile(r.notice) }); err != nil {
				return res, err
			}
		}
		if err := p.writeAndSync(r, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// check is the round's look at the disk before it writes: its file (ownFile.check), and
// the free-space floor, counting the file the round is about to cut when it has none (a
// 64 MiB file cut on a nearly full disk ate past the floor).
func (p *fsyncWriter) check() error {
	if err := p.file.check(); err != nil {
		return err
	}
	var newFile int64
	if p.file.fd < 0 {
		newFile = p.opts.FileSize
	}
	return checkFreeFloor(p.opts.Dir, p.opts.MinFree, newFile)
}

// writeAndSync does one operation: a write and its fdatasync, one timed region, so that
// the write's end is the fdatasync's start; the data is made before it.
func (p *fsyncWriter) writeAndSync(r *round, res *Result) error {
	p.rng.Read(p.buf)
	p.calls = [2]ioCall{{sys: sysPwrite, fd: p.file.fd, buf: p.buf, off: p.off}, {sys: sysFdatasync, fd: p.file.fd}}
	d, made, err := r.timed(p.file.path, p.calls[:], shortWrite)
	if made < 2 {
		return err // the write failed: nothing reached the disk to sync
	}
	// A failed fdatasync is observed too, in the same histogram, as etcd observes
	// wal_fsync before it returns the error: one that failed after 30 s is the sick disk
	// the histogram is there to show, and a separate series would hide it from every
	// dashboard and alert built on this one. The write and the load it put on the disk
	// count as well.
	r.observe(Sample{Phase: PhaseWrite, Duration: p.calls[0].took})
	r.observe(Sample{Phase: PhaseFdatasync, Duration: p.calls[1].took})
	res.Ops++
	res.Bytes += int64(len(p.buf))
	res.IO += d
	if err != nil {
		// After a failed fdatasync the file's state is unknown: the kernel may have
		// dropped the dirty pages and cleared the error, so a second fdatasync would
		// succeed over data that never reached the disk (PostgreSQL's "fsyncgate").
		// etcd treats the error as fatal for its WAL file; the probe abandons its file,
		// and the next round starts on a fresh one.
		p.file.drop()
		return err
	}
	p.off += int64(len(p.buf))
	return nil
}

// shortWrite explains a write that moved n of its want bytes.
func shortWrite(n, want int) error { return fmt.Errorf("short write: %d of %d bytes", n, want) }

// cutFile starts a new file: on first use, and when the next block would not fit. A
// fresh file at start-up means every write lands on preallocated, never written blocks,
// as etcd's do and as fio's recipe does. Cutting a file (mkdir, create, fallocate,
// fdatasync) hangs on a frozen or dying filesystem just as a write does, which is why a
// round makes it untimed.
func (p *fsyncWriter) cutFile(notice func(string)) error {
	if err := p.file.create(notice, Header{File: "fsync", Size: p.opts.FileSize}); err != nil {
		return err
	}
	p.off = HeaderSize
	return nil
}

// closeFiles closes the file, which stays on disk for the next start to replace, and the
// probe directory.
func (p *fsyncWriter) closeFiles() error {
	p.file.close()
	return nil
}

// Remove closes and deletes the probe file. The daemon leaves its files for the next start
// (`cleanup` removes them); the benchmarks and the alert replay in tests/ remove theirs.
func (p *Fsync) Remove() error {
	err := p.kind.file.remove()
	_ = p.Close()
	return err
}

func newRNG() *rand.ChaCha8 {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	return rand.NewChaCha8(seed)
}
