package probe

import (
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
	fd, _, err := pd.createFile("fsync.probe", Header{Kind: "fsync", Size: 1 << 20})
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
	g, _, err := other.createFile("elsewhere.probe", Header{Kind: "fsync", Size: 4096})
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
