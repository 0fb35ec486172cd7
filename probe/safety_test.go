package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// A FIFO at a probe file's name is refused without blocking. The header used to be written
// through the file opened again by name, O_WRONLY, which blocks on a FIFO until a reader
// comes: a FIFO swapped in wedged the worker with no error and /-/ready at 200
// (TestSwappedProbeDirectoryRedirectsNoWrite). Every open is O_NONBLOCK now, and the
// descriptor is fstat'ed before any I/O.
func TestFIFOAtTheProbePathDoesNotWedgeTheRound(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
	must(t, unix.Mkfifo(filepath.Join(dir, DirName, "commit.probe"), 0o600))
	p, err := NewCommit(CommitOptions{Dir: dir, Ops: 1, Pages: 3, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { _, err := p.Round(context.Background(), (&commits{}).env()); done <- err }()
	select {
	case err := <-done:
		var foreign *ForeignFileError
		if !errors.As(err, &foreign) || foreign.Reason != "it is not a regular file" {
			t.Fatalf("round on a FIFO: %v, want a ForeignFileError saying it is not a regular file", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the round is wedged on the FIFO")
	}
}

// A second name for a probe file is how someone points the probe's writes at a file of
// theirs (or, without fs.protected_hardlinks, at anyone's): a file with more than one link
// is refused before any I/O, and left as it was.
func TestHardLinkAtTheProbePathIsRefused(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	content := []byte("diskprobe_exporter probe file v1\nkind=fsync\nsize=1048576\nstate=prepared\n")
	must(t, os.WriteFile(victim, content, 0o600))
	must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
	must(t, os.Link(victim, filepath.Join(dir, DirName, "fsync.probe")))
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Round(context.Background(), (&collected{}).env())
	var foreign *ForeignFileError
	if !errors.As(err, &foreign) || foreign.Reason != "it has 2 links: another name leads to it" {
		t.Fatalf("round on a hard link: %v, want a ForeignFileError naming the links", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != string(content) {
		t.Error("the hard-linked file was changed")
	}
}

// The fsync probe checked the free-space floor before its first round without counting
// the file that round cuts: free space went from 83 to 19 MiB against a 40 MiB floor. It
// counts it now, on a filesystem of the test's own so that nothing else moves its free
// space.
func TestFsyncFirstFileRespectsTheFreeSpaceFloor(t *testing.T) {
	_, dir := testenv.RAMLoopExt4(t, 96<<20)
	free, err := FreeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	const fileSize = 32 << 20
	// Over the floor now, under it once the file is cut.
	p, err := NewFsync(FsyncOptions{Dir: dir, Ops: 1, BlockSize: 2300, FileSize: fileSize, MinFree: free - fileSize/2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Round(context.Background(), (&collected{}).env()); !errors.Is(err, ErrLowFreeSpace) {
		t.Fatalf("first round: %v, want ErrLowFreeSpace", err)
	}
	if _, err := os.Stat(filepath.Join(dir, DirName, fsyncFileName)); !os.IsNotExist(err) {
		t.Errorf("the probe file was cut under the floor: %v", err)
	}
	if now, _ := FreeBytes(dir); now < free-fileSize/2 {
		t.Errorf("free space went from %d to %d MiB against a %d MiB floor", free>>20, now>>20, (free-fileSize/2)>>20)
	}
}
