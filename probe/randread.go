package probe

import (
	"context"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
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
	p.beginRound()
	res, err := p.round(ctx, env)
	p.endRound(&res)
	return res, err
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
		d, err := p.readAt(env.Inflight, p.src.randomOffset(p.rng, int64(len(p.buf))))
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

func (p *Randread) readAt(inflight *Inflight, off int64) (time.Duration, error) {
	p.settle()
	p.cpu.begin()
	var n int
	var d time.Duration
	t0 := time.Now()
	inflight.begin(t0)
	err := ignoringEINTR(func() (err error) {
		n, err = unix.Pread(p.src.fd, p.buf, off)
		d = time.Since(t0)
		return err
	})
	inflight.end()
	if err == nil && n != len(p.buf) {
		err = p.src.shortRead(n, len(p.buf))
	}
	if err != nil {
		return 0, &os.PathError{Op: "read", Path: p.src.path, Err: err}
	}
	return d, nil
}

// Close frees the buffer; the source is closed by its owner.
func (p *Randread) Close() error {
	p.cpu.closeFDs()
	freeBuffer(p.buf)
	p.buf = nil
	return nil
}
