package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Seqread reads `bytes` in block_size O_DIRECT reads, sequentially from a random aligned
// offset, wrapping at the end. Its throughput is bytes over the time inside the reads:
// the waits of the rate limit are not the disk's.
type Seqread struct {
	src       *ReadSource
	bytes     int64
	blockSize int
	rng       *rand.Rand
	settler
}

// NewSeqread reads src.
func NewSeqread(src *ReadSource, bytes int64, blockSize int) (*Seqread, error) {
	if err := src.checkBlockSize("seqread", int64(blockSize)); err != nil {
		return nil, err
	}
	return &Seqread{src: src, bytes: bytes, blockSize: blockSize, rng: rand.New(newRNG())}, nil
}

// Round reads the configured number of bytes. The buffer lives for the round only: a
// 1 MiB block per target would otherwise stay resident between rounds minutes apart.
func (p *Seqread) Round(ctx context.Context, env *Env) (Result, error) {
	return p.runRound(ctx, env, p.round)
}

func (p *Seqread) round(ctx context.Context, env *Env) (Result, error) {
	var res Result
	if !p.src.ready(env.Inflight) {
		return res, ErrNotPrepared
	}
	buf, err := alignedBuffer(p.blockSize)
	if err != nil {
		return res, err
	}
	defer freeBuffer(buf)
	bs := int64(len(buf))
	off := p.src.randomOffset(p.rng, bs)
	for res.Bytes < p.bytes {
		if err := p.budget(ctx, env, len(buf)); err != nil {
			return res, err
		}
		if off+bs > p.src.end {
			off = p.src.firstBlock(bs)
		}
		d, err := p.readBlock(env.Inflight, p.src, buf, off)
		if err != nil {
			return res, err
		}
		env.observe(Sample{Phase: PhaseRead, Duration: d})
		off += bs
		res.Ops++
		res.Bytes += bs
		res.IO += d
	}
	return res, nil
}

// Close releases nothing of the source, which its owner closes.
func (p *Seqread) Close() error {
	p.cpu.closeFDs()
	return nil
}

// Seqwrite writes `bytes` in block_size O_DIRECT writes into its own file, sequentially
// from a random aligned offset, and ends with one fdatasync inside the timing. It only
// ever writes the exporter's own file.
type Seqwrite struct {
	dir, path string
	bytes     int64
	minFree   int64
	fallback  int64
	fd        int
	align     int64
	blockSize int
	rng       *rand.Rand
	fill      *rand.ChaCha8
	settler
}

// NewSeqwrite prepares the probe directory; the file is created by the first round.
func NewSeqwrite(targetDir string, bytes int64, blockSize int, minFree, fallbackAlign int64) (*Seqwrite, error) {
	if err := CheckDirectIO(targetDir); err != nil {
		return nil, err
	}
	dir, err := EnsureDir(targetDir)
	if err != nil {
		return nil, err
	}
	if fallbackAlign > 0 && int64(blockSize)%fallbackAlign != 0 {
		return nil, fmt.Errorf("seqwrite: block_size %d is not a multiple of the O_DIRECT alignment %d", blockSize, fallbackAlign)
	}
	return &Seqwrite{dir: targetDir, path: filepath.Join(dir, "seqwrite.probe"), bytes: bytes, minFree: minFree,
		fallback: fallbackAlign, fd: -1, blockSize: blockSize, rng: rand.New(newRNG()), fill: newRNG()}, nil
}

// Round writes the configured number of bytes and fdatasyncs.
func (p *Seqwrite) Round(ctx context.Context, env *Env) (Result, error) {
	return p.runRound(ctx, env, p.round)
}

func (p *Seqwrite) round(ctx context.Context, env *Env) (Result, error) {
	var res Result
	if p.fd >= 0 && !stillLinked(env.Inflight, p.fd) {
		_ = p.Close() // the directory was replaced: start a new file in the new one
	}
	var newFile int64 // the bytes a new file is about to take
	if p.fd < 0 {
		newFile = p.bytes
	}
	if err := checkFreeFloor(env.Inflight, p.dir, p.minFree, newFile); err != nil {
		return res, err
	}
	if p.fd < 0 {
		env.Inflight.begin(timeNow()) // creating the file can hang as its writes can
		err := p.open(env)
		env.Inflight.end()
		if err != nil {
			return res, err
		}
	}
	buf, err := alignedBuffer(p.blockSize) // for the round only, as Seqread's
	if err != nil {
		return res, err
	}
	defer freeBuffer(buf)
	bs := int64(len(buf))
	start, end := int64(HeaderSize), HeaderSize+p.bytes
	off := start
	if slots := (end - start - bs) / p.align; slots > 0 {
		off = start + p.rng.Int64N(slots+1)*p.align
	}
	for res.Bytes < p.bytes {
		if err := p.budget(ctx, env, len(buf)); err != nil {
			return res, err
		}
		if off+bs > end {
			off = start
		}
		p.fill.Read(buf)
		d, err := p.timed(env.Inflight, timedCall{sys: sysPwrite, fd: p.fd, buf: buf, off: off, path: p.path},
			func(n, want int) error { return fmt.Errorf("short write at offset %d: %d of %d bytes", off, n, want) })
		if err != nil {
			return res, err
		}
		off += bs
		res.Ops++
		res.Bytes += bs
		res.IO += d
	}
	d, err := p.timed(env.Inflight, timedCall{sys: sysFdatasync, fd: p.fd, path: p.path}, nil)
	if err != nil {
		_ = p.Close() // the file's state is unknown: the next round starts a fresh one (see Fsync.writeAndSync)
		return res, err
	}
	res.IO += d
	return res, nil
}

func (p *Seqwrite) open(env *Env) error {
	if p.fd >= 0 {
		return nil
	}
	if _, err := EnsureDir(p.dir); err != nil { // it may have been deleted under us
		return err
	}
	fd, err := createDirectFile(env, p.path, Header{Kind: "seqwrite", Size: HeaderSize + p.bytes})
	if err != nil {
		return err
	}
	align, err := DirectIOAlignment(fd, p.path, p.fallback)
	if err != nil {
		_ = unix.Close(fd)
		return err
	}
	if int64(p.blockSize)%align != 0 {
		_ = unix.Close(fd)
		return fmt.Errorf("seqwrite: block_size %d is not a multiple of the O_DIRECT alignment %d of %s", p.blockSize, align, p.path)
	}
	p.fd, p.align = fd, align
	return nil
}

// Close closes the file.
func (p *Seqwrite) Close() error {
	p.cpu.closeFDs()
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
	return nil
}
