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
		Name: "randread", Order: 20, ReadsSource: true, DirectIO: true, DefaultOn: OnDirectories | OnBlockDevices,
		Keys:         []string{"interval", "ops", "block_size", "file_size"},
		Defaults:     Settings{Interval: 15 * time.Second, Ops: 20, BlockSize: 4 << 10, FileSize: DefaultReadFileSize},
		LargestBlock: blockSize,
		Check: func(s *Settings) (string, string) {
			if s.BlockSize > s.FileSize {
				return "block_size", fmt.Sprintf("must not exceed file_size (%s), got %s", bytesize.Config(s.FileSize), bytesize.Config(s.BlockSize))
			}
			return "", ""
		},
		Histograms: []Histogram{
			{Phase: PhaseRead, Name: "read_duration_seconds", Help: "Time of each O_DIRECT pread(2) of the randread probe, queue depth 1 (fio psync clat).", Buckets: LatencyBuckets},
		},
		New: func(site Site, s Settings) (Prober, error) { return NewRandread(site.Reads, s.Ops, int(s.BlockSize)) },
	})
}

// Randread does block_size preads at uniformly random aligned offsets, O_DIRECT, one at a
// time, timed around the system call alone: what fio's psync engine reports as clat.
type Randread struct{ prober[*randomReader] }

// randomReader is the randread probe's kind.
type randomReader struct {
	src *ReadSource
	ops int
	buf []byte
	rng *rand.Rand
}

// NewRandread reads src; it checks the block size against the O_DIRECT alignment.
func NewRandread(src *ReadSource, ops, blockSize int) (*Randread, error) {
	if err := src.checkBlockSize("randread", int64(blockSize)); err != nil {
		return nil, err
	}
	buf, err := alignedBuffer(blockSize)
	if err != nil {
		return nil, err
	}
	return &Randread{prober[*randomReader]{kind: &randomReader{src: src, ops: ops, buf: buf, rng: rand.New(newRNG())}}}, nil
}

// run does the configured number of random reads.
func (p *randomReader) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := p.src.ready(ctx, r, &res); err != nil {
		return res, err
	}
	for range p.ops {
		if err := r.waitBudget(ctx, len(p.buf)); err != nil {
			return res, err
		}
		d, err := p.src.readBlock(r, p.buf, p.src.randomOffset(p.rng, int64(len(p.buf))))
		if err != nil {
			return res, err
		}
		r.observe(Sample{Phase: PhaseRead, Duration: d})
		res.Ops++
		res.Bytes += int64(len(p.buf))
		res.IO += d
	}
	return res, nil
}

// closeFiles frees the buffer; the source is closed by its owner.
func (p *randomReader) closeFiles() error {
	freeBuffer(p.buf)
	p.buf = nil
	return nil
}
