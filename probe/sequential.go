package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

// The sequential kinds observe no latency: their rounds' bytes over their time inside the
// calls are what they record (Kind.Throughput).
func init() {
	register(&Kind{
		Name: "seqread", Order: 30, ReadsSource: true, DirectIO: true, DefaultOn: OnDirectories | OnBlockDevices,
		Keys:         []string{"interval", "bytes", "block_size"},
		Defaults:     Settings{Interval: 10 * time.Minute, Bytes: 64 << 20, BlockSize: 1 << 20},
		LargestBlock: blockSize,
		Check:        blockWithinBytes,
		Throughput:   "read",
		New:          func(site Site, s Settings) (Prober, error) { return NewSeqread(site.Reads, s.Bytes, int(s.BlockSize)) },
	})
	register(&Kind{
		Name: "seqwrite", Order: 40, Writes: true, DirectIO: true,
		Keys:         []string{"interval", "bytes", "block_size"},
		Defaults:     Settings{Interval: time.Hour, Bytes: 64 << 20, BlockSize: 1 << 20},
		LargestBlock: blockSize,
		Check:        blockWithinBytes,
		Throughput:   "write",
		New: func(site Site, s Settings) (Prober, error) {
			return NewSeqwrite(site.Dir, s.Bytes, int(s.BlockSize), site.MinFree, site.Align)
		},
	})
}

func blockWithinBytes(s *Settings) (string, string) {
	if s.BlockSize > s.Bytes {
		return "block_size", fmt.Sprintf("must not exceed bytes (%s), got %s", bytesize.Config(s.Bytes), bytesize.Config(s.BlockSize))
	}
	return "", ""
}

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
	if err := p.src.ready(ctx, r, &res); err != nil {
		return res, err
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
	root      string // the target's path or probe_dir
	file      ownFile
	bytes     int64
	minFree   int64
	fallback  int64
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
	// Checked twice on purpose: here against the device's block size, so that a bad
	// block_size is refused before any file is made; at open against what the file's
	// filesystem says (statx), which may be larger.
	if fallbackAlign > 0 && int64(blockSize)%fallbackAlign != 0 {
		return nil, fmt.Errorf("seqwrite: block_size %d is not a multiple of the O_DIRECT alignment %d", blockSize, fallbackAlign)
	}
	file, err := openOwnFile(targetDir, seqwriteFileName)
	if err != nil {
		return nil, err
	}
	return &Seqwrite{prober[*sequentialWriter]{kind: &sequentialWriter{root: targetDir, file: file,
		bytes: bytes, minFree: minFree, fallback: fallbackAlign, blockSize: blockSize, rng: rand.New(newRNG()), fill: newRNG()}}}, nil
}

// run writes the configured number of bytes and fdatasyncs.
func (p *sequentialWriter) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := r.untimed(p.check); err != nil {
		return res, err
	}
	if p.file.fd < 0 {
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
		write := [1]ioCall{{sys: sysPwrite, fd: p.file.fd, buf: buf, off: off}}
		d, _, err := r.timed(p.file.path, write[:], nil)
		if err != nil {
			return res, err
		}
		off += bs
		res.Ops++
		res.Bytes += bs
		res.IO += d
	}
	sync := [1]ioCall{{sys: sysFdatasync, fd: p.file.fd}}
	d, _, err := r.timed(p.file.path, sync[:], nil)
	if err != nil {
		p.file.drop() // the file's state is unknown: the next round starts a fresh one (see fsyncWriter.writeAndSync)
		return res, err
	}
	res.IO += d
	return res, nil
}

// check is the round's look at the disk before it writes: its file (ownFile.check), and
// the free-space floor, counting the file a round without one is about to make.
func (p *sequentialWriter) check() error {
	if err := p.file.check(); err != nil {
		return err
	}
	var newFile int64
	if p.file.fd < 0 {
		newFile = p.bytes
	}
	return checkFreeFloor(p.root, p.minFree, newFile)
}

// seqwriteFileName is the seqwrite probe's file in the probe directory.
const seqwriteFileName = "seqwrite.probe"

// open makes a new file, switched to O_DIRECT, and takes its alignment.
func (p *sequentialWriter) open(notice func(string)) error {
	if p.file.fd >= 0 {
		return nil
	}
	if err := p.file.create(notice, Header{File: "seqwrite", Size: HeaderSize + p.bytes}); err != nil {
		return err
	}
	if err := setDirect(p.file.fd, p.file.path); err != nil {
		p.file.drop()
		return err
	}
	align, err := DirectIOAlignment(p.file.fd, p.file.path, p.fallback)
	if err != nil {
		p.file.drop()
		return err
	}
	if int64(p.blockSize)%align != 0 {
		p.file.drop()
		return fmt.Errorf("seqwrite: block_size %d is not a multiple of the O_DIRECT alignment %d of %s", p.blockSize, align, p.file.path)
	}
	p.align = align
	return nil
}

// closeFiles closes the file, which stays on disk for the next start to replace, and the
// probe directory.
func (p *sequentialWriter) closeFiles() error {
	p.file.close()
	return nil
}
