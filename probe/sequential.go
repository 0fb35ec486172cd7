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
type Seqread struct{ prober[*sequentialReader] }

// sequentialReader is the seqread probe's kind.
type sequentialReader struct {
	src       *ReadSource
	bytes     int64
	blockSize int
	rng       *rand.Rand
}

// NewSeqread reads src.
func NewSeqread(src *ReadSource, bytes int64, blockSize int) (*Seqread, error) {
	if err := src.checkBlockSize("seqread", int64(blockSize)); err != nil {
		return nil, err
	}
	return &Seqread{prober[*sequentialReader]{kind: &sequentialReader{src: src, bytes: bytes, blockSize: blockSize, rng: rand.New(newRNG())}}}, nil
}

// run reads the configured number of bytes. The buffer lives for the round only: a
// 1 MiB block per target would otherwise stay resident between rounds minutes apart.
func (p *sequentialReader) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if !p.src.ready(r) {
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
		if err := r.waitBudget(ctx, len(buf)); err != nil {
			return res, err
		}
		if off+bs > p.src.end {
			off = p.src.firstBlock(bs)
		}
		d, err := p.src.readBlock(r, buf, off)
		if err != nil {
			return res, err
		}
		r.observe(Sample{Phase: PhaseRead, Duration: d})
		off += bs
		res.Ops++
		res.Bytes += bs
		res.IO += d
	}
	return res, nil
}

// closeFiles releases nothing of the source, which its owner closes.
func (p *sequentialReader) closeFiles() error { return nil }

// Seqwrite writes `bytes` in block_size O_DIRECT writes into its own file, sequentially
// from a random aligned offset, and ends with one fdatasync inside the timing. It only
// ever writes the exporter's own file.
type Seqwrite struct{ prober[*sequentialWriter] }

// sequentialWriter is the seqwrite probe's kind.
type sequentialWriter struct {
	dir, path string
	bytes     int64
	minFree   int64
	fallback  int64
	fd        int
	align     int64
	blockSize int
	rng       *rand.Rand
	fill      *rand.ChaCha8
}

// NewSeqwrite prepares the probe directory; the file is created by the first round.
func NewSeqwrite(targetDir string, bytes int64, blockSize int, minFree, fallbackAlign int64) (*Seqwrite, error) {
	if err := CheckDirectIO(targetDir); err != nil {
		return nil, err
	}
	dir, err := ensureDir(targetDir)
	if err != nil {
		return nil, err
	}
	// Checked twice on purpose: here against the device's block size, so that a bad
	// block_size is refused before any file is made; at open against what the file's
	// filesystem says (statx), which may be larger.
	if fallbackAlign > 0 && int64(blockSize)%fallbackAlign != 0 {
		return nil, fmt.Errorf("seqwrite: block_size %d is not a multiple of the O_DIRECT alignment %d", blockSize, fallbackAlign)
	}
	return &Seqwrite{prober[*sequentialWriter]{kind: &sequentialWriter{dir: targetDir, path: filepath.Join(dir, "seqwrite.probe"),
		bytes: bytes, minFree: minFree, fallback: fallbackAlign, fd: -1, blockSize: blockSize, rng: rand.New(newRNG()), fill: newRNG()}}}, nil
}

// run writes the configured number of bytes and fdatasyncs.
func (p *sequentialWriter) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if p.fd >= 0 {
		_ = r.untimed(func() error {
			if !stillLinked(p.fd) {
				_ = p.closeFiles() // the directory was replaced: start a new file in the new one
			}
			return nil
		})
	}
	var newFile int64 // the bytes a new file is about to take
	if p.fd < 0 {
		newFile = p.bytes
	}
	if err := r.untimed(func() error { return checkFreeFloor(p.dir, p.minFree, newFile) }); err != nil {
		return res, err
	}
	if p.fd < 0 {
		// Creating the file can hang as its writes can.
		if err := r.untimed(func() error { return p.open(r.notice) }); err != nil {
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
		if err := r.waitBudget(ctx, len(buf)); err != nil {
			return res, err
		}
		if off+bs > end {
			off = start
		}
		p.fill.Read(buf)
		write := [1]ioCall{{sys: sysPwrite, fd: p.fd, buf: buf, off: off}}
		d, _, err := r.timed(p.path, write[:], nil)
		if err != nil {
			return res, err
		}
		off += bs
		res.Ops++
		res.Bytes += bs
		res.IO += d
	}
	sync := [1]ioCall{{sys: sysFdatasync, fd: p.fd}}
	d, _, err := r.timed(p.path, sync[:], nil)
	if err != nil {
		_ = p.closeFiles() // the file's state is unknown: the next round starts a fresh one (see fsyncWriter.writeAndSync)
		return res, err
	}
	res.IO += d
	return res, nil
}

func (p *sequentialWriter) open(notice func(string)) error {
	if p.fd >= 0 {
		return nil
	}
	if _, err := ensureDir(p.dir); err != nil { // it may have been deleted under us
		return err
	}
	fd, err := createDirectFile(notice, p.path, Header{Kind: "seqwrite", Size: HeaderSize + p.bytes})
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

// closeFiles closes the file; it stays on disk for the next start to replace.
func (p *sequentialWriter) closeFiles() error {
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
	return nil
}
