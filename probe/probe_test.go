package probe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

type collected struct{ write, sync, read int }

func (c *collected) env() *Env {
	return &Env{Budget: Unlimited, Inflight: &Inflight{}, Observe: func(s Sample) {
		switch s.Phase {
		case PhaseWrite:
			c.write++
		case PhaseFdatasync:
			c.sync++
		case PhaseRead:
			c.read++
		}
		if s.Duration <= 0 {
			panic("non-positive duration")
		}
	}}
}

func TestFsyncTimesEachWriteAndFdatasyncInItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 10, BlockSize: 2300, FileSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c collected
	res, err := p.Round(context.Background(), c.env())
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 10 || res.Bytes != 23000 || c.write != 10 || c.sync != 10 {
		t.Errorf("result %+v, samples %+v; want 10 writes and 10 fdatasyncs", res, c)
	}
	path := filepath.Join(dir, DirName, "fsync.probe")
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 64<<10 {
		t.Errorf("probe file mode %v size %d; want 0600 and the fallocated 64 KiB", fi.Mode().Perm(), fi.Size())
	}
	if di, _ := os.Lstat(filepath.Join(dir, DirName)); di.Mode().Perm() != 0o700 {
		t.Errorf(".diskprobe mode %v, want 0700", di.Mode().Perm())
	}
	head := make([]byte, len(headerMagic))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	if string(head) != headerMagic {
		t.Errorf("probe file starts with %q, not our header", head)
	}
}

func TestFsyncCutsANewFileWhenFull(t *testing.T) {
	dir := t.TempDir()
	// Room for 3 blocks after the header: the fourth write needs a new file.
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 7, BlockSize: 1000, FileSize: HeaderSize + 3000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c collected
	if _, err := p.Round(context.Background(), c.env()); err != nil {
		t.Fatal(err)
	}
	if c.sync != 7 {
		t.Errorf("%d fdatasyncs, want 7 across file rotations", c.sync)
	}
	if p.kind.off != HeaderSize+1000 {
		t.Errorf("write offset %d after 7 writes into 3-block files; want the second block of the third file", p.kind.off)
	}
}

func TestForeignFileAtTheProbePathIsNeverTouched(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
	path := filepath.Join(dir, DirName, "fsync.probe")
	content := []byte("precious data that is not ours\n")
	must(t, os.WriteFile(path, content, 0o600))
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Round(context.Background(), (&collected{}).env())
	var foreign *ForeignFileError
	if !errors.As(err, &foreign) {
		t.Fatalf("round on a foreign file: %v, want a ForeignFileError", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
		t.Error("the foreign file was changed")
	}
}

func TestSymlinkAtTheProbePathIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("do not write here"), 0o600))
	must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
	must(t, os.Symlink(victim, filepath.Join(dir, DirName, "fsync.probe")))
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Round(context.Background(), (&collected{}).env())
	var foreign *ForeignFileError
	if !errors.As(err, &foreign) {
		t.Fatalf("round through a symlink: %v, want a ForeignFileError", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "do not write here" {
		t.Error("the symlink target was written")
	}
}

func TestSymlinkedProbeDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Symlink(t.TempDir(), filepath.Join(dir, DirName)))
	if _, err := openProbeDir(dir); err == nil {
		t.Fatal("a symlinked .diskprobe was accepted")
	}
}

func TestLowFreeSpaceStopsWritesBeforeTheyStart(t *testing.T) {
	dir := t.TempDir()
	free, err := FreeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: 1 << 20, MinFree: free + 1<<40})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Round(context.Background(), (&collected{}).env())
	if !errors.Is(err, ErrLowFreeSpace) {
		t.Fatalf("got %v, want ErrLowFreeSpace", err)
	}
	if _, err := os.Stat(filepath.Join(dir, DirName, "fsync.probe")); !os.IsNotExist(err) {
		t.Error("a probe file was created under the free-space floor")
	}
}

func TestReadProbeFileIsPreparedWithoutHolesAndReused(t *testing.T) {
	dir := t.TempDir()
	if CheckDirectIO(dir) != nil {
		t.Skip("temporary directory is on a memory filesystem")
	}
	src, err := NewReadFile(dir, 4<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := NewRandread(src, 50, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var c collected
	if _, err := rr.Round(context.Background(), c.env()); !errors.Is(err, ErrNotPrepared) {
		t.Fatalf("read before preparation: %v, want ErrNotPrepared", err)
	}
	if err := src.Prepare(context.Background(), c.env(), nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DirName, "read.probe")
	fd, _ := unix.Open(path, unix.O_RDONLY, 0)
	hole, _ := unix.Seek(fd, 0, unix.SEEK_HOLE)
	unix.Close(fd)
	if hole != HeaderSize+4<<20 {
		t.Errorf("first hole at %d, want none before the end (%d)", hole, HeaderSize+4<<20)
	}
	if _, err := rr.Round(context.Background(), c.env()); err != nil || c.read != 50 {
		t.Fatalf("round: %v, %d reads", err, c.read)
	}
	rr.Close()
	src.Close()
	before, _ := os.Stat(path)

	again, err := NewReadFile(dir, 4<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var steps []Result
	if err := again.Prepare(context.Background(), c.env(), func(res Result) { steps = append(steps, res) }); err != nil || len(steps) != 1 || !steps[0].Filling.Done || !again.Reused() {
		t.Fatalf("restart: rounds %+v, reused %v, err %v; want the prepared file reused by the first", steps, again.Reused(), err)
	}
	if after, _ := os.Stat(path); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the prepared file was rewritten on restart")
	}
}

func TestFsyncRoundDoesNotAllocate(t *testing.T) {
	p, err := NewFsync(FsyncOptions{Dir: t.TempDir(), Ops: 1, BlockSize: 2300, FileSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	env := (&collected{}).env()
	if _, err := p.Round(context.Background(), env); err != nil { // creates the file
		t.Fatal(err)
	}
	var err2 error
	allocs := testing.AllocsPerRun(50, func() { _, err2 = p.Round(context.Background(), env) })
	if err2 != nil {
		t.Fatal(err2)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per write+fdatasync round", allocs)
	}
}

// must fails the test on a setup step's error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
