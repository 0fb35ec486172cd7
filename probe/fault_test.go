package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// These tests need root and a real kernel: the FUSE fixture of internal/testenv answers
// the probes' system calls with the errors a FUSE daemon or a failing disk gives.

// probeOps are the FUSE operations the probes' system calls become.
var probeOps = []string{
	testenv.OpLookup, testenv.OpGetattr, testenv.OpSetattr, testenv.OpStatfs, testenv.OpStatx,
	testenv.OpMkdir, testenv.OpCreate, testenv.OpOpen, testenv.OpRead, testenv.OpWrite,
	testenv.OpFsync, testenv.OpFallocate, testenv.OpLseek,
}

// A FUSE daemon that honours interrupts answers EINTR when the calling thread got a
// signal, and in Go every thread gets the runtime's preemption signals: each probe must
// retry the call, not fail. First every call of a probe's first round is interrupted
// (creating its directory and file included), then only the timed reads, writes and
// fdatasyncs of a round on the file made.
func TestInterruptedSystemCallsAreRetriedNotProbeErrors(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	const eintrs = 3 // per operation, before it is served
	timed := []string{testenv.OpRead, testenv.OpWrite, testenv.OpFsync}
	interrupt := func(ops ...string) {
		h.Fail(unix.EINTR, 0, probeOps...)
		h.Fail(unix.EINTR, eintrs, ops...)
	}
	// checkRetried fails the test unless the calls it names were each interrupted
	// eintrs times: the round went through the EINTRs, not around them.
	checkRetried := func(t *testing.T, ops ...string) {
		t.Helper()
		for _, op := range ops {
			if n := h.Failed(op); n != eintrs {
				t.Errorf("%s answered EINTR %d times, want %d", op, n, eintrs)
			}
		}
	}
	mkdir := func(t *testing.T) string {
		dir := filepath.Join(h.Dir, t.Name())
		must(t, os.MkdirAll(dir, 0o755))
		return dir
	}

	t.Run("fsync", func(t *testing.T) {
		dir := mkdir(t)
		interrupt(probeOps...)
		p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 5, BlockSize: 2300, FileSize: 1 << 20, MinFree: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, ops := range [][]string{probeOps, timed} {
			interrupt(ops...)
			var c collected
			res, err := p.Round(context.Background(), c.env())
			if err != nil || res.Ops != 5 || c.write != 5 || c.sync != 5 {
				t.Fatalf("round: %+v, %+v samples, %v; want 5 writes and 5 fdatasyncs", res, c, err)
			}
			checkRetried(t, testenv.OpWrite, testenv.OpFsync)
		}
	})

	t.Run("read", func(t *testing.T) {
		dir := mkdir(t)
		interrupt(probeOps...)
		src, err := NewReadFile(dir, 1<<20, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		var c collected
		if err := src.Prepare(context.Background(), c.env(), nil); err != nil {
			t.Fatalf("preparing the read probe file: %v", err)
		}
		checkRetried(t, testenv.OpStatfs, testenv.OpCreate, testenv.OpWrite, testenv.OpFsync, testenv.OpLseek)
		rr, err := NewRandread(src, 10, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		interrupt(timed...)
		if res, err := rr.Round(context.Background(), c.env()); err != nil || res.Ops != 10 {
			t.Fatalf("randread round: %+v, %v", res, err)
		}
		checkRetried(t, testenv.OpRead)
		sr, err := NewSeqread(src, 256<<10, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		interrupt(timed...)
		if res, err := sr.Round(context.Background(), c.env()); err != nil || res.Bytes != 256<<10 {
			t.Fatalf("seqread round: %+v, %v", res, err)
		}
		checkRetried(t, testenv.OpRead)
	})

	t.Run("seqwrite", func(t *testing.T) {
		dir := mkdir(t)
		interrupt(probeOps...)
		p, err := NewSeqwrite(dir, 256<<10, 64<<10, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, ops := range [][]string{probeOps, timed} {
			interrupt(ops...)
			if res, err := p.Round(context.Background(), (&collected{}).env()); err != nil || res.Bytes != 256<<10 {
				t.Fatalf("round: %+v, %v", res, err)
			}
			checkRetried(t, testenv.OpWrite, testenv.OpFsync)
		}
	})
}

// inode is the inode number of path, and holds that inode open until the test ends, so
// that a new file can never be given its number.
func inode(t *testing.T, path string) (ino uint64, nlink func() uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st unix.Stat_t
	must(t, unix.Fstat(int(f.Fd()), &st))
	return st.Ino, func() uint64 {
		must(t, unix.Fstat(int(f.Fd()), &st))
		return uint64(st.Nlink)
	}
}

// etcd observes wal_fsync before it returns a failed fdatasync's error, and gives up on
// the file: after a failed fdatasync the kernel may have dropped the pages and cleared the
// error, so writing on in that file would measure fdatasyncs of data already lost.
func TestFailedFdatasyncIsObservedAndItsFileAbandoned(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	backing := filepath.Join(h.Backing, DirName, "fsync.probe")
	const block = 2300
	p, err := NewFsync(FsyncOptions{Dir: h.Dir, Ops: 3, BlockSize: block, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c collected
	if _, err := p.Round(context.Background(), c.env()); err != nil {
		t.Fatal(err)
	}
	before, nlink := inode(t, backing)

	h.Fail(unix.EIO, 1, testenv.OpFsync)
	c = collected{}
	res, err := p.Round(context.Background(), c.env())
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("round with a failing fdatasync: %v, want EIO", err)
	}
	if c.write != 1 || c.sync != 1 || res.Ops != 1 { // collected panics on a duration ≤ 0
		t.Errorf("failed fdatasync: %+v samples, result %+v; want its write and fdatasync observed and counted", c, res)
	}

	c = collected{}
	if res, err := p.Round(context.Background(), c.env()); err != nil || res.Ops != 3 {
		t.Fatalf("round after the failure: %+v, %v", res, err)
	}
	after, _ := inode(t, backing)
	if after == before || nlink() != 0 {
		t.Errorf("the round after a failed fdatasync wrote into the same file (inode %d, then %d; old one has %d links)", before, after, nlink())
	}
	if p.kind.off != HeaderSize+3*block {
		t.Errorf("write offset %d after 3 writes since the failure; want %d, the fourth block of a fresh file", p.kind.off, HeaderSize+3*block)
	}
}

// Seqwrite's file after a failed fdatasync: the same lesson as the fsync probe's.
func TestSeqwriteAbandonsItsFileAfterAFailedFdatasync(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	p, err := NewSeqwrite(h.Dir, 256<<10, 64<<10, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Round(context.Background(), (&collected{}).env()); err != nil {
		t.Fatal(err)
	}
	backing := filepath.Join(h.Backing, DirName, "seqwrite.probe")
	before, nlink := inode(t, backing)
	h.Fail(unix.EIO, 1, testenv.OpFsync)
	if _, err := p.Round(context.Background(), (&collected{}).env()); !errors.Is(err, unix.EIO) {
		t.Fatalf("round with a failing fdatasync: %v, want EIO", err)
	}
	if _, err := p.Round(context.Background(), (&collected{}).env()); err != nil {
		t.Fatal(err)
	}
	if after, _ := inode(t, backing); after == before || nlink() != 0 {
		t.Errorf("the round after a failed fdatasync wrote into the same file (inode %d, then %d)", before, after)
	}
}

// A probe directory deleted under a running exporter (and perhaps recreated) leaves
// seqwrite's descriptor on a deleted file, where its writes would succeed and measure
// nothing anyone can see: the next round must write a file in the directory there now.
func TestSeqwriteFollowsADeletedOrRecreatedProbeDirectory(t *testing.T) {
	for _, recreate := range []bool{true, false} {
		name := map[bool]string{true: "recreated", false: "deleted"}[recreate]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if CheckDirectIO(dir) != nil {
				t.Skip("temporary directory is on a memory filesystem")
			}
			p, err := NewSeqwrite(dir, 256<<10, 64<<10, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Round(context.Background(), (&collected{}).env()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, DirName, "seqwrite.probe")
			before, _ := inode(t, path)
			must(t, os.RemoveAll(filepath.Join(dir, DirName)))
			if recreate {
				must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
			}
			if _, err := p.Round(context.Background(), (&collected{}).env()); err != nil {
				t.Fatalf("round after the probe directory was %s: %v", name, err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("no probe file in the probe directory after a round: %v", err)
			}
			if after, _ := inode(t, path); after == before {
				t.Errorf("inode %d before and after", after)
			}
			if st := kernelState(t, path); st.header.File != "seqwrite" {
				t.Errorf("header %+v", st.header)
			}
		})
	}
}
