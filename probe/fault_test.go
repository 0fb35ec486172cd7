package probe

import (
	"context"
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
		src, err := NewProbeFile(dir, 1<<20, 1, 0)
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
