package probe

import (
	"context"
	"math/rand/v2"
	"time"
)

var timeNow = time.Now

// Randread does block_size preads at uniformly random aligned offsets, O_DIRECT, one at a
// time, timed around the system call alone: what fio's psync engine reports as clat.
type Randread struct {
	src *ReadSource
	ops int
	buf []byte
	rng *rand.Rand
	settler
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
	return &Randread{src: src, ops: ops, buf: buf, rng: rand.New(newRNG())}, nil
}

// Round does the configured number of random reads.
func (p *Randread) Round(ctx context.Context, env *Env) (Result, error) {
	return p.runRound(ctx, env, p.round)
}

func (p *Randread) round(ctx context.Context, env *Env) (Result, error) {
	var res Result
	if !p.src.ready(env.Inflight) {
		return res, ErrNotPrepared
	}
	for range p.ops {
		if err := p.budget(ctx, env, len(p.buf)); err != nil {
			return res, err
		}
		d, err := p.readBlock(env.Inflight, p.src, p.buf, p.src.randomOffset(p.rng, int64(len(p.buf))))
		if err != nil {
			return res, err
		}
		env.observe(Sample{Phase: PhaseRead, Duration: d})
		res.Ops++
		res.Bytes += int64(len(p.buf))
		res.IO += d
	}
	return res, nil
}

// Close frees the buffer; the source is closed by its owner.
func (p *Randread) Close() error {
	p.cpu.closeFDs()
	freeBuffer(p.buf)
	p.buf = nil
	return nil
}
