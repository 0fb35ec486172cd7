package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// filler writes a probe file in full once with random data, in bounded steps taken by the
// rounds of the probe that owns it: the read probe file, which the read probes share, and
// the commit probe's database file. Blocks never written read back "too good to be true"
// on SSDs and thin volumes, and on thin volumes a first write also allocates: a file is
// used only once every block of it has been written, fdatasynced, checked to have no hole
// (SEEK_HOLE) and its header marked prepared. A file an earlier run prepared for the same
// file and size, without a hole, is taken as it is.
//
// The file lives in the held probe directory (ownFile): it is opened, created and
// removed relative to that descriptor, fstat'ed before any I/O, and never opened again
// by name. Every call goes through the round: the writes each wait for the budget and
// are the outstanding operation (untimed), as are the look at the directory, creating
// and allocating the file and the final fdatasync, which hang on a frozen or dying
// filesystem as any write does.
type filler struct {
	file    ownFile
	which   string // which file, as its header and Filling name it: "read", "commit"
	size    int64  // the whole file, header included
	minFree int64
	direct  bool // written and kept open with O_DIRECT (the read file); else buffered
	// onReady, when set, looks at the file once it is prepared or reused (the read file
	// takes its O_DIRECT alignment from statx); an error lets the file go.
	onReady func(fd int) error

	off      int64 // written up to here: size once prepared
	prepared bool
	reused   bool   // the prepared file was an earlier run's
	chunk    []byte // the aligned write buffer, held only while filling
	rng      *rand.ChaCha8
}

// FillBlock is the size of each write that fills a probe file: the largest operation of
// a kind that fills one, which the target's bytes budget must let through at once.
const FillBlock = 1 << 20

// prepareChunk is how much of a probe file one step writes at most: a step is bounded so
// that the target's other probes keep their schedule meanwhile.
const prepareChunk = 8 << 20

// newFiller holds root's probe directory for the file name of size bytes, header
// included; the file itself is opened or made by the first step.
func newFiller(root, name, which string, size, minFree int64, direct bool) (*filler, error) {
	file, err := openOwnFile(root, name)
	if err != nil {
		return nil, err
	}
	return &filler{file: file, which: which, size: size, minFree: minFree, direct: direct, rng: newRNG()}, nil
}

// step takes the round's step towards a prepared file. It returns nil when the round may
// use the file: prepared before the round, or an earlier run's prepared file reopened
// (Filling says so); ErrNotPrepared when the round wrote a step of it (a chunk, or the
// last one and the checks that finish it): the round is the preparation's, so that its
// Result counts the filling's I/O and no probe's, Filling says how far the file is, and
// the next round uses it once Filling.Done. An error lets go of the file: the next step
// starts it again.
func (f *filler) step(ctx context.Context, r *round, res *Result) error {
	if err := r.untimed(f.check); err != nil {
		return err
	}
	if f.prepared {
		return nil
	}
	defer f.report(res)
	if f.file.fd < 0 {
		if err := r.untimed(func() error { return f.open(r.notice) }); err != nil {
			return f.failed(err)
		}
		if f.prepared {
			return nil // reused: nothing written, the round may use it at once
		}
	}
	if f.chunk == nil {
		chunk, err := alignedBuffer(FillBlock)
		if err != nil {
			return err
		}
		f.chunk = chunk
	}
	for written := 0; written < prepareChunk && f.off < f.size; {
		b := f.chunk[:min(int64(len(f.chunk)), f.size-f.off)]
		if err := r.waitBudget(ctx, len(b)); err != nil {
			return err
		}
		f.rng.Read(b)
		var n int
		err := r.untimed(func() error {
			return ignoringEINTR(func() (err error) { n, err = unix.Pwrite(f.file.fd, b, f.off); return err })
		})
		if err == nil && n != len(b) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
		}
		if err != nil {
			return f.failed(&os.PathError{Op: "write", Path: f.file.path, Err: err})
		}
		f.off += int64(n)
		written += n
		res.Ops++
		res.Bytes += int64(n)
	}
	if f.off < f.size {
		return ErrNotPrepared
	}
	if err := r.untimed(f.finish); err != nil {
		return f.failed(err)
	}
	freeBuffer(f.chunk)
	f.chunk = nil
	return ErrNotPrepared
}

// report tells the round's Result how far the file is.
func (f *filler) report(res *Result) {
	res.Filling = Filling{File: f.which, Path: f.file.path, Progress: float64(f.off) / float64(f.size), Done: f.prepared, Reused: f.reused}
}

// failed lets the file go after err, and says which file it was.
func (f *filler) failed(err error) error {
	f.drop()
	return fmt.Errorf("preparing the %s probe file: %w", f.which, err)
}

// check is the step's look at the disk (ownFile.check); a file let go takes its
// preparation's progress with it.
func (f *filler) check() error {
	err := f.file.check()
	if f.file.fd < 0 {
		f.reset()
	}
	return err
}

// open takes the file an earlier run prepared, when its header says so for this file and
// size and it has no hole; otherwise it makes a new one, of which the steps write the
// data after the header.
func (f *filler) open(notice func(string)) error {
	fd, h, err := f.file.dir.openFile(f.file.name)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case h.File == f.which && h.Prepared && h.Size == f.size:
		if hole, err := seek(fd, unix.SEEK_HOLE); err == nil && hole >= f.size {
			if f.direct {
				if err := setDirect(fd, f.file.path); err != nil {
					_ = unix.Close(fd)
					return err
				}
			}
			f.file.fd, f.off = fd, f.size
			if err := f.ready(); err != nil {
				return err
			}
			f.reused = true
			return nil
		}
		_ = unix.Close(fd)
	default:
		_ = unix.Close(fd)
	}
	if _, under, err := underFreeFloor(f.file.dir.root, f.minFree, f.size); err != nil {
		return err
	} else if under {
		return fmt.Errorf("%w: the %d MiB %s probe file needs %d MiB free on top of the %d MiB floor",
			ErrLowFreeSpace, f.size>>20, f.which, f.size>>20, f.minFree>>20)
	}
	if err := f.file.create(notice, Header{File: f.which, Size: f.size}); err != nil {
		return err
	}
	if f.direct {
		if err := setDirect(f.file.fd, f.file.path); err != nil {
			f.file.drop()
			return err
		}
	}
	f.off = HeaderSize
	return nil
}

// finish makes the written file durable, checks it has no hole (a hole would read back as
// zeros without touching the disk), and marks its header prepared.
func (f *filler) finish() error {
	if err := ignoringEINTR(func() error { return unix.Fdatasync(f.file.fd) }); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.file.path, Err: err}
	}
	hole, err := seek(f.file.fd, unix.SEEK_HOLE)
	if err != nil {
		return &os.PathError{Op: "seek hole", Path: f.file.path, Err: err}
	}
	if hole < f.size {
		return fmt.Errorf("%s: hole at offset %d after writing the whole file; the filesystem did not keep the data", f.file.path, hole)
	}
	if err := writeHeader(f.file.fd, f.file.path, Header{File: f.which, Size: f.size, Prepared: true}); err != nil {
		return err
	}
	return f.ready()
}

// ready marks the open file prepared, once onReady has looked at it.
func (f *filler) ready() error {
	if f.onReady != nil {
		if err := f.onReady(f.file.fd); err != nil {
			return err
		}
	}
	f.prepared = true
	return nil
}

// reset forgets the preparation's progress and returns its buffer: with many targets,
// 1 MiB each would dominate the exporter's memory for the rest of its life.
func (f *filler) reset() {
	f.off, f.prepared, f.reused = 0, false, false
	freeBuffer(f.chunk)
	f.chunk = nil
}

// drop closes the file, which stays on disk for the next step or start to reuse; a file
// closed before it was prepared is written again from the start.
func (f *filler) drop() {
	f.file.drop()
	f.reset()
}

// close closes the file and lets the probe directory go.
func (f *filler) close() {
	f.drop()
	f.file.close()
}

// remove closes the file and deletes it, then lets the probe directory go.
func (f *filler) remove() error {
	f.reset()
	return f.file.remove()
}
