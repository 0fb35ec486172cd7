package probe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A purge or `diskprobe_exporter cleanup` run as root removes the exporter's probe files
// and nothing else: not a file without the header (even at a probe file's name), not a
// symlink to one of ours, and not the directory while anything else is in it.
func TestCleanupRemovesOnlyFilesWithTheHeader(t *testing.T) {
	root := t.TempDir()
	pd, err := openProbeDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer pd.close()
	dir := pd.path
	ours := filepath.Join(dir, "fsync.probe")
	fd, _, err := pd.createFile("fsync.probe", Header{File: "fsync", Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
	interrupted := filepath.Join(dir, "read.probe") // created, never given its header
	foreign := filepath.Join(dir, "seqwrite.probe")
	notes := filepath.Join(dir, "notes.txt")
	for path, content := range map[string]string{interrupted: "", foreign: "someone's data", notes: ""} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other, err := openProbeDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.close()
	outside := other.filePath("elsewhere.probe")
	g, _, err := other.createFile("elsewhere.probe", Header{File: "fsync", Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(g)
	link := filepath.Join(dir, "link.probe")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}

	found, err := FindOwnFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found.Files)
	slices.Sort(found.Foreign)
	if want := []string{ours, interrupted}; !slices.Equal(found.Files, want) {
		t.Errorf("ours: %v, want %v", found.Files, want)
	}
	if want := []string{link, notes, foreign}; !slices.Equal(found.Foreign, want) {
		t.Errorf("not ours: %v, want %v", found.Foreign, want)
	}
	removed, err := found.Remove()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, found.Files) {
		t.Errorf("removed %v, want %v", removed, found.Files)
	}
	for _, p := range []string{foreign, notes, link, outside, dir} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}

	// With nothing else left in it, the directory goes too.
	for _, p := range []string{foreign, notes, link} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	found, err = FindOwnFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := found.Remove(); err != nil || !slices.Equal(removed, []string{dir}) {
		t.Errorf("removed %v (%v), want the empty %s", removed, err, dir)
	}
	// A target without a .diskprobe, or a block device's path, has nothing of ours.
	for _, p := range []string{root, "/dev/null"} {
		if found, err := FindOwnFiles(p); err != nil || found.Dir != "" || len(found.Files) != 0 {
			t.Errorf("FindOwnFiles(%s) = %+v, %v; want nothing", p, found, err)
		}
	}
}

// cleanup, often run as root, removes only in the directory it listed: a .diskprobe
// swapped between the listing and the removal (whoever can rename entries of the root)
// loses nothing, and a root that group or others can write without the sticky bit is
// refused, as the daemon refuses to write there.
func TestCleanupRemovesNothingFromASwappedDirectory(t *testing.T) {
	root := t.TempDir()
	pd, err := openProbeDir(root)
	if err != nil {
		t.Fatal(err)
	}
	fd, _, err := pd.createFile("fsync.probe", Header{File: "fsync", Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
	pd.close()
	found, err := FindOwnFiles(root)
	if err != nil || len(found.Files) != 1 {
		t.Fatalf("found %+v, %v; want the fsync file", found, err)
	}
	// Swapped: a directory of someone's, with a file of theirs carrying our header.
	must(t, os.Rename(filepath.Join(root, DirName), filepath.Join(root, "moved")))
	must(t, os.Mkdir(filepath.Join(root, DirName), 0o700))
	theirs := filepath.Join(root, DirName, "fsync.probe")
	must(t, os.WriteFile(theirs, []byte(headerMagic+"kind=fsync\n"), 0o600))
	var replaced *ReplacedDirError
	if removed, err := found.Remove(); !errors.As(err, &replaced) || len(removed) != 0 {
		t.Errorf("Remove after the swap: removed %v, %v; want nothing and a ReplacedDirError", removed, err)
	}
	for _, p := range []string{theirs, filepath.Join(root, "moved", "fsync.probe")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}

	open := t.TempDir()
	must(t, os.Chmod(open, 0o777))
	var unsafeRoot *UnsafeRootError
	must(t, os.Mkdir(filepath.Join(open, DirName), 0o700))
	if _, err := FindOwnFiles(open); !errors.As(err, &unsafeRoot) {
		t.Errorf("FindOwnFiles in a 0777 directory: %v, want an UnsafeRootError", err)
	}
}
