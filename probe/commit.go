package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

// CommitOptions configure the probe shaped like etcd's backend commit.
type CommitOptions struct {
	Dir      string // the target directory; the file lives in Dir/.diskprobe
	Ops      int    // commits per round
	Pages    int    // pages written per commit, each its own pwrite, before the meta page
	FileSize int64  // the whole file, header included: the database the pages are scattered over
	MinFree  int64  // free-space floor in bytes; 0 disables it
}

func init() {
	register(&Kind{
		Name: "commit", Order: 50, Writes: true,
		Keys: []string{"interval", "ops", "pages", "file_size"},
		// 10 commits a round (as many as etcd's backend makes in a second at its 100 ms
		// batch interval), 10 pages each (the mean of 9.5 page writes per commit of a
		// measured etcd under a Kubernetes-like load) scattered over a 128 MiB file (a
		// cluster of some thousand objects; 24 MiB measured for 3000 pod-sized ones, and
		// etcd's quota is 2 GiB). docs/design.md#the-commit-probe has the measurement.
		Defaults: Settings{Interval: 15 * time.Second, Ops: 10, Pages: 10, FileSize: 128 << 20},
		// Its file is filled once in blocks of FillBlock; its pages are smaller.
		LargestBlock: func(Settings) int64 { return FillBlock },
		Check: func(s *Settings) (string, string) {
			if s.Pages > MaxCommitPages {
				return "pages", fmt.Sprintf("must be at most %d, got %d", MaxCommitPages, s.Pages)
			}
			// The header and two meta pages, then the data pages, of at most 64 KiB each
			// (bbolt's page size is the machine's, os.Getpagesize(): 4 KiB on x86-64,
			// up to 64 KiB on arm64 and ppc64le kernels).
			if need := 3*commitMaxPage + int64(s.Pages)*commitMaxPage; s.FileSize < need {
				return "file_size", fmt.Sprintf("must hold the header, two meta pages and %d pages of up to %s each (%s), got %s",
					s.Pages, bytesize.Config(commitMaxPage), bytesize.Config(need), bytesize.Config(s.FileSize))
			}
			return "", ""
		},
		Histograms: []Histogram{
			{Phase: PhaseCommit, Name: "commit_duration_seconds", Help: "Time of each whole commit of the commit probe (its page writes, fdatasync, meta page write, fdatasync), as etcd's backend_commit times bbolt's commit.", Buckets: CommitBuckets},
		},
		New: func(site Site, s Settings) (Prober, error) {
			return NewCommit(CommitOptions{Dir: site.Dir, Ops: s.Ops, Pages: s.Pages, FileSize: s.FileSize, MinFree: site.MinFree})
		},
	})
}

// MaxCommitPages is the most pages a commit of the commit probe may write: its buffers
// hold them all.
const MaxCommitPages = 1024

// commitMaxPage is the largest page size a machine may give bbolt.
const commitMaxPage = 64 << 10

// Commit does to the disk what bbolt's Tx.Commit does under etcd's backend: the
// transaction's dirty pages written with one buffered pwrite each, in ascending file
// order (bbolt sorts them by page id), at offsets scattered over a large file that was
// written in full once, one fdatasync; then the meta page at the start of the file (the
// two meta pages alternate by transaction id) and a second fdatasync. The whole commit is
// one sample, as etcd's backend_commit_duration_seconds times tx.Commit() whole. The pages
// are the database's page size, which bbolt takes from os.Getpagesize(). Where each
// default comes from is in docs/design.md#the-commit-probe.
type Commit struct{ prober[*committer] }

// committer is the commit probe's kind: its file, filled once by its first rounds
// (filler), and the next commit's calls.
type committer struct {
	opts     CommitOptions
	fill     *filler
	pageSize int64
	metaOff  [2]int64 // the two meta pages, after the header
	first    int64    // the first data page
	slots    int64    // data pages in the file
	txid     uint64

	pages []byte // Pages data pages and the meta page, the last
	offs  []int64
	seen  map[int64]struct{}
	calls []ioCall
	rng   *rand.Rand
	data  *rand.ChaCha8
}

// commitFileName is the commit probe's file in the probe directory.
const commitFileName = "commit.probe"

// NewCommit checks the options and the probe directory; the file is made by the first
// rounds.
func NewCommit(opts CommitOptions) (*Commit, error) {
	ps := int64(os.Getpagesize())
	first := (HeaderSize+ps-1)/ps*ps + 2*ps
	if opts.Ops <= 0 || opts.Pages <= 0 || opts.FileSize < first+int64(opts.Pages)*ps {
		return nil, fmt.Errorf("commit probe: invalid options %+v: the file must hold the header, two meta pages and %d pages of %d bytes", opts, opts.Pages, ps)
	}
	fill, err := newFiller(opts.Dir, commitFileName, "commit", opts.FileSize, opts.MinFree, false)
	if err != nil {
		return nil, err
	}
	c := &committer{
		opts:     opts,
		fill:     fill,
		pageSize: ps,
		metaOff:  [2]int64{first - 2*ps, first - ps},
		first:    first,
		slots:    (opts.FileSize - first) / ps,
		pages:    make([]byte, (opts.Pages+1)*int(ps)),
		offs:     make([]int64, opts.Pages),
		seen:     make(map[int64]struct{}, opts.Pages),
		calls:    make([]ioCall, opts.Pages+3),
		rng:      rand.New(newRNG()),
		data:     newRNG(),
	}
	return &Commit{prober[*committer]{kind: c}}, nil
}

// run takes a step of the file's preparation while it is not ready (ErrNotPrepared);
// then it does opts.Ops commits.
func (p *committer) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := p.fill.step(ctx, r, &res); err != nil {
		return res, err
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
	p.data.Read(p.pages)
	n := len(p.offs)
	fd := p.fill.file.fd
	for i, off := range p.offs {
		p.calls[i] = ioCall{sys: sysPwrite, fd: fd, buf: p.pages[i*ps : (i+1)*ps], off: off}
	}
	p.calls[n] = ioCall{sys: sysFdatasync, fd: fd}
	p.calls[n+1] = ioCall{sys: sysPwrite, fd: fd, buf: p.pages[n*ps:], off: p.metaOff[p.txid%2]}
	p.calls[n+2] = ioCall{sys: sysFdatasync, fd: fd}
	d, made, err := r.timed(p.fill.file.path, p.calls, shortWrite)
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
		// (see fsyncWriter.writeAndSync): the file is let go, and the next round opens
		// it again, relative to the held directory, and checks it (filler.open).
		p.fill.drop()
		return err
	}
	p.txid++
	return nil
}

// closeFiles closes the file and the probe directory.
func (p *committer) closeFiles() error {
	p.fill.close()
	return nil
}

// Remove closes and deletes the probe file. The daemon leaves its files for the next
// start (`cleanup` removes them); the benchmarks remove theirs (check removes its whole
// scratch directory).
func (p *Commit) Remove() error {
	err := p.kind.fill.remove()
	_ = p.Close()
	return err
}
