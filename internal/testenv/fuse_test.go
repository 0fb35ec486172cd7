package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHangFSHoldsEachCallUntilReleased guards the fixture itself: a hung call must not
// return (not from a cache either) until Release, and must return after it.
func TestHangFSHoldsEachCallUntilReleased(t *testing.T) {
	h := MountHangFS(t, HangFSOptions{})
	file := filepath.Join(h.Dir, "f")
	if err := os.WriteFile(file, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(file, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// The exporter reads with O_DIRECT; a buffered read could be served by the page cache.
	dfd, err := unix.Open(file, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(buf) }()
	calls := []struct {
		op   string
		call func() error
	}{
		{OpGetattr, func() error { var st unix.Stat_t; return unix.Stat(file, &st) }},
		{OpStatfs, func() error { var s unix.Statfs_t; return unix.Statfs(h.Dir, &s) }},
		{OpLookup, func() error { var st unix.Stat_t; return unix.Stat(filepath.Join(h.Dir, "missing"), &st) }},
		{OpRead, func() error { _, err := unix.Pread(dfd, buf, 0); return err }},
		{OpWrite, func() error { _, err := unix.Pwrite(fd, make([]byte, 4096), 0); return err }},
		{OpFsync, func() error { return unix.Fdatasync(fd) }},
		{OpMkdir, func() error { return unix.Mkdir(filepath.Join(h.Dir, "d"), 0o700) }},
		{OpCreate, func() error {
			fd, err := unix.Open(filepath.Join(h.Dir, "new"), unix.O_CREAT|unix.O_RDWR, 0o600)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
	}
	for _, c := range calls {
		h.Hang(c.op)
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case err := <-done:
			t.Errorf("%s returned while hung: %v", c.op, err)
			h.Release()
			continue
		case <-time.After(300 * time.Millisecond):
		}
		if h.Held() < 1 {
			t.Errorf("%s: the call blocked but no request is held", c.op)
		}
		h.Release()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still blocked 5s after Release", c.op)
		}
	}
	// bindfs-like by default: no fallocate.
	if err := unix.Fallocate(fd, 0, 0, 1<<20); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("fallocate on a HangFS without it: %v, want EOPNOTSUPP", err)
	}
}

// TestHangFSCleanupFreesABlockedCaller: a test that fails with a call still blocked must
// not leave it blocked (cleanup unmounts lazily, then releases).
func TestHangFSCleanupFreesABlockedCaller(t *testing.T) {
	RequireRoot(t)
	done := make(chan error, 1)
	t.Run("inner", func(t *testing.T) {
		h := MountHangFS(t, HangFSOptions{})
		h.Hang()
		go func() { var s unix.Statfs_t; done <- unix.Statfs(h.Dir, &s) }()
		h.WaitHeld(t, 1, 5*time.Second)
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a caller blocked on the HangFS is still blocked 5s after its test's cleanup")
	}
}

// TestHangFSFailAnswersTheErrorThenServes guards the fixture's injected errors: the caller
// sees the errno itself (the kernel passes EINTR through), as many times as asked, then
// the call is served again.
func TestHangFSFailAnswersTheErrorThenServes(t *testing.T) {
	h := MountHangFS(t, HangFSOptions{})
	fd, err := unix.Open(filepath.Join(h.Dir, "f"), unix.O_CREAT|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	h.Fail(unix.EINTR, 2, OpWrite)
	for i := range 2 {
		if _, err := unix.Pwrite(fd, []byte("x"), 0); err != unix.EINTR {
			t.Errorf("write %d: %v, want EINTR", i, err)
		}
	}
	if _, err := unix.Pwrite(fd, []byte("x"), 0); err != nil {
		t.Errorf("write after the injected errors: %v", err)
	}
	if n := h.Failed(OpWrite); n != 2 {
		t.Errorf("Failed(write) = %d, want 2", n)
	}
}
