package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// CommitOptions configure the probe shaped like etcd's backend commit.
type CommitOptions struct {
	Dir      string // the target directory; the file lives in Dir/.diskprobe
	Ops      int    // commits per round
	Pages    int    // pages written per commit, each its own pwrite, before the meta page
	FileSize int64  // the whole file, header included: the database the pages are scattered over
	MinFree  int64  // free-space floor in bytes; 0 disables it
}

// Commit does to the disk what bbolt's Tx.Commit does under etcd's backend: the
// transaction's dirty pages written with one buffered pwrite each, in ascending file
// order (bbolt sorts them by page id), at offsets scattered over a large file that was
// written in full once, one fdatasync; then the meta page at the start of the file (the
// two meta pages alternate by transaction id) and a second fdatasync. The whole commit is
// one sample, as etcd's backend_commit_duration_seconds times tx.Commit() whole. The pages
// are the database's page size, which bbolt takes from os.Getpagesize(). Where each
// default comes from is in docs/design.md#the-commit-probe.
type Commit struct{ prober[*committer] }

// committer is the commit probe's kind: its file, its preparation and the next commit's
// calls.
type committer struct {
	opts     CommitOptions
	file     ownFile
	pageSize int64
	metaOff  [2]int64 // the two meta pages, after the header
	first    int64    // the first data page
	slots    int64    // data pages in the file
	filled   int64    // preparation: the file is written up to here; FileSize once prepared
	prepared bool
	txid     uint64

	pages []byte // Pages data pages and the meta page, the last
	offs  []int64
	seen  map[int64]struct{}
	calls []ioCall
	rng   *rand.Rand
	fill  *rand.ChaCha8
	chunk []byte // preparation's write buffer, held only while preparing
}

// commitFileName is the commit probe's file in the probe directory.
const commitFileName = "commit.probe"

// CommitFillBlock is the size of each write that fills the commit probe's file once: the
// largest operation of the kind, which the target's bytes budget must let through.
const CommitFillBlock = 1 << 20

// NewCommit checks the options and the probe directory; the file is made by the first
// rounds.
func NewCommit(opts CommitOptions) (*Commit, error) {
	ps := int64(os.Getpagesize())
	first := (HeaderSize+ps-1)/ps*ps + 2*ps
	if opts.Ops <= 0 || opts.Pages <= 0 || opts.FileSize < first+int64(opts.Pages)*ps {
		return nil, fmt.Errorf("commit probe: invalid options %+v: the file must hold the header, two meta pages and %d pages of %d bytes", opts, opts.Pages, ps)
	}
	file, err := openOwnFile(opts.Dir, commitFileName)
	if err != nil {
		return nil, err
	}
	c := &committer{
		opts:     opts,
		file:     file,
		pageSize: ps,
		metaOff:  [2]int64{first - 2*ps, first - ps},
		first:    first,
		slots:    (opts.FileSize - first) / ps,
		pages:    make([]byte, (opts.Pages+1)*int(ps)),
		offs:     make([]int64, opts.Pages),
		seen:     make(map[int64]struct{}, opts.Pages),
		calls:    make([]ioCall, opts.Pages+3),
		rng:      rand.New(newRNG()),
		fill:     newRNG(),
	}
	return &Commit{prober[*committer]{kind: c}}, nil
}

// run fills the file, in steps of prepareChunk a round, and returns ErrNotPrepared until
// it is full; then it does opts.Ops commits.
func (p *committer) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := r.untimed(p.check); err != nil {
		return res, err
	}
	if p.file.fd < 0 {
		if err := r.untimed(func() error { return p.open(r.notice) }); err != nil {
			return res, err
		}
	}
	if !p.prepared {
		if err := p.prepareStep(ctx, r, &res); err != nil || !p.prepared {
			if err == nil {
				err = ErrNotPrepared
			}
			return res, err
		}
	}
	if err := r.untimed(func() error { return checkFreeFloor(p.opts.Dir, p.opts.MinFree, 0) }); err != nil {
		return res, err
	}
	ps := int(p.pageSize)
	for range p.opts.Ops {
		// The budget is taken for the whole commit before it starts: a wait inside it
		// would be timed as the disk's. Each write and each fdatasync is an operation.
		for range p.opts.Pages + 1 {
			if err := r.waitBudget(ctx, ps); err != nil {
				return res, err
			}
		}
		for range 2 {
			if err := r.waitBudget(ctx, 0); err != nil {
				return res, err
			}
		}
		if err := p.commit(r, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// check is the round's look at its file (ownFile.check); a file let go takes its
// preparation's progress with it.
func (p *committer) check() error {
	err := p.file.check()
	if p.file.fd < 0 {
		p.dropFile()
	}
	return err
}

// commit does one commit, one timed region: the data pages at distinct random page
// offsets in ascending order, fdatasync, the meta page, fdatasync.
func (p *committer) commit(r *round, res *Result) error {
	ps := int(p.pageSize)
	clear(p.seen)
	for i := range p.offs {
		for {
			off := p.first + p.rng.Int64N(p.slots)*p.pageSize
			if _, dup := p.seen[off]; !dup {
				p.seen[off] = struct{}{}
				p.offs[i] = off
				break
			}
		}
	}
	slices.Sort(p.offs)
	p.fill.Read(p.pages)
	n := len(p.offs)
	for i, off := range p.offs {
		p.calls[i] = ioCall{sys: sysPwrite, fd: p.file.fd, buf: p.pages[i*ps : (i+1)*ps], off: off}
	}
	p.calls[n] = ioCall{sys: sysFdatasync, fd: p.file.fd}
	p.calls[n+1] = ioCall{sys: sysPwrite, fd: p.file.fd, buf: p.pages[n*ps:], off: p.metaOff[p.txid%2]}
	p.calls[n+2] = ioCall{sys: sysFdatasync, fd: p.file.fd}
	d, made, err := r.timed(p.file.path, p.calls, shortWrite)
	// Observed failed or not, as etcd observes backend_commit before it treats the
	// error as fatal: a commit that failed after 30 s is what the histogram is for.
	r.observe(Sample{Phase: PhaseCommit, Duration: d})
	res.Ops += made
	for _, c := range p.calls[:made] {
		res.Bytes += int64(len(c.buf))
	}
	res.IO += d
	if err != nil {
		// After a failed write or fdatasync the file's pages are in an unknown state
		// (see fsyncWriter.writeAndSync): the file is opened again, relative to the held
		// directory, and checked, next round.
		p.dropFile()
		return err
	}
	p.txid++
	return nil
}

// open takes the file an earlier run filled, when its header says so for this size and
// it has no hole; otherwise it starts a new one, to be filled by prepareStep. Opening and
// creating hang on a frozen or dying filesystem as writes do: a round makes it untimed.
func (p *committer) open(notice func(string)) error {
	fd, h, err := p.file.dir.openFile(commitFileName)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case h.Kind == "commit" && h.Prepared && h.Size == p.opts.FileSize:
		if hole, err := seek(fd, unix.SEEK_HOLE); err == nil && hole >= p.opts.FileSize {
			p.file.fd, p.filled, p.prepared = fd, p.opts.FileSize, true
			return nil
		}
		_ = unix.Close(fd)
	default:
		_ = unix.Close(fd)
	}
	if _, under, err := underFreeFloor(p.opts.Dir, p.opts.MinFree, p.opts.FileSize); err != nil {
		return err
	} else if under {
		return fmt.Errorf("%w: the %d MiB commit probe file needs %d MiB free on top of the %d MiB floor",
			ErrLowFreeSpace, p.opts.FileSize>>20, p.opts.FileSize>>20, p.opts.MinFree>>20)
	}
	if err := p.file.create(notice, Header{Kind: "commit", Size: p.opts.FileSize}); err != nil {
		return err
	}
	p.filled, p.prepared = HeaderSize, false
	return nil
}

// prepareStep writes up to prepareChunk bytes of random data into the file, each write
// within the budget, and finishes the file when it is full: fdatasync, no hole (a page
// never written reads, and on thin volumes writes, unlike a database's), header marked
// prepared. A database's pages have all been written; so have the file's before the
// first commit.
func (p *committer) prepareStep(ctx context.Context, r *round, res *Result) error {
	if p.chunk == nil {
		p.chunk = make([]byte, CommitFillBlock)
	}
	for written := 0; written < prepareChunk && p.filled < p.opts.FileSize; {
		b := p.chunk[:min(int64(len(p.chunk)), p.opts.FileSize-p.filled)]
		if err := r.waitBudget(ctx, len(b)); err != nil {
			return err
		}
		p.fill.Read(b)
		var n int
		err := r.untimed(func() error {
			return ignoringEINTR(func() (err error) { n, err = unix.Pwrite(p.file.fd, b, p.filled); return err })
		})
		if err == nil && n != len(b) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
		}
		if err != nil {
			p.dropFile()
			return &os.PathError{Op: "write", Path: p.file.path, Err: err}
		}
		p.filled += int64(n)
		written += n
		res.Ops++
		res.Bytes += int64(n)
	}
	if p.filled < p.opts.FileSize {
		return nil
	}
	if err := r.untimed(p.finish); err != nil {
		p.dropFile()
		return err
	}
	p.chunk = nil
	p.prepared = true
	return nil
}

func (p *committer) finish() error {
	if err := ignoringEINTR(func() error { return unix.Fdatasync(p.file.fd) }); err != nil {
		return &os.PathError{Op: "fdatasync", Path: p.file.path, Err: err}
	}
	hole, err := seek(p.file.fd, unix.SEEK_HOLE)
	if err != nil {
		return &os.PathError{Op: "seek hole", Path: p.file.path, Err: err}
	}
	if hole < p.opts.FileSize {
		return fmt.Errorf("%s: hole at offset %d after writing the whole file; the filesystem did not keep the data", p.file.path, hole)
	}
	return writeHeader(p.file.fd, p.file.path, Header{Kind: "commit", Size: p.opts.FileSize, Prepared: true})
}

// dropFile closes the file; it stays on disk for the next round or start to reuse. A
// file closed before it was full is filled again from the start by the next round.
func (p *committer) dropFile() {
	p.chunk = nil
	p.file.drop()
	p.prepared, p.filled = false, 0
}

// closeFiles closes the file and the probe directory.
func (p *committer) closeFiles() error {
	p.dropFile()
	p.file.close()
	return nil
}

// Remove closes and deletes the probe file. The daemon leaves its files for the next start
// (`cleanup` removes them); check and the benchmarks remove theirs.
func (p *Commit) Remove() error {
	p.kind.dropFile()
	err := p.kind.file.remove()
	_ = p.Close()
	return err
}
