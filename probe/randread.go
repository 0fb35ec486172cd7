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
	cpu cpuClock
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
	p.cpu.bind()
	defer p.cpu.release()
	res, err := p.round(ctx, env)
	res.CPUWaitKnown = p.cpu.known()
	return res, err
}

func (p *Randread) round(ctx context.Context, env *Env) (Result, error) {
	var res Result
	if !p.src.ready(env.Inflight) {
		return res, ErrNotPrepared
	}
	for range p.ops {
		if err := env.Budget.Wait(ctx, len(p.buf)); err != nil {
			return res, err
		}
		d, waited, err := p.readAt(env.Inflight, p.src.randomOffset(p.rng, int64(len(p.buf))))
		if err != nil {
			return res, err
		}
		env.observe(Sample{Phase: PhaseRead, Duration: d})
		res.Ops++
		res.Bytes += int64(len(p.buf))
		res.IO += d
		res.CPUWait += waited
	}
	return res, nil
}

// readAt is one timed read, and the thread's CPU wait around it, read outside it.
func (p *Randread) readAt(inflight *Inflight, off int64) (d, waited time.Duration, err error) {
	p.settle()
	waited = p.cpu.before()
	var n int
	t0 := time.Now()
	inflight.begin(t0)
	err = ignoringEINTR(func() (err error) {
		n, err = unix.Pread(p.src.fd, p.buf, off)
		d = time.Since(t0)
		return err
	})
	inflight.end()
	waited = max(p.cpu.after()-waited, 0)
	if err == nil && n != len(p.buf) {
		err = p.src.shortRead(n, len(p.buf))
	}
	if err != nil {
		return 0, 0, &os.PathError{Op: "read", Path: p.src.path, Err: err}
	}
	return d, waited, nil
}

// Close frees the buffer; the source is closed by its owner.
func (p *Randread) Close() error {
	p.cpu.closeFD()
	freeBuffer(p.buf)
	p.buf = nil
	return nil
}
