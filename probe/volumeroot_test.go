package probe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A volume root left writable by all (local-path's 0777): the probe root is made 0755, and
// one made 0777 before (the kubelet's subPath directory) is narrowed; either way the
// exporter then accepts it.
func TestPrepareVolumeRoot(t *testing.T) {
	for _, existing := range []bool{false, true} {
		vol := t.TempDir()
		if err := os.Chmod(vol, 0o777); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(vol, VolumeRootName)
		if existing {
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := CheckProbeRoot(root); err == nil {
				t.Fatal("CheckProbeRoot accepted a 0777 root: the test shows nothing")
			}
		}
		did, err := PrepareVolumeRoot(vol, VolumeRootName)
		if err != nil {
			t.Fatalf("existing=%v: %v", existing, err)
		}
		st, err := os.Stat(root)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o022 != 0 || !st.IsDir() {
			t.Errorf("existing=%v: %s is %v; want a directory no group or other can write", existing, root, st.Mode())
		}
		if err := CheckProbeRoot(root); err != nil {
			t.Errorf("existing=%v: the exporter refuses the prepared root: %v", existing, err)
		}
		if want := map[bool]string{false: "made", true: "narrowed to 0755"}[existing]; !strings.Contains(did, want) {
			t.Errorf("existing=%v: said %q; want %q in it", existing, did, want)
		}
	}
}

// A symlink or a file at the name is refused, and nothing is changed through it.
func TestPrepareVolumeRootRefusesWhatIsNotADirectory(t *testing.T) {
	vol := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Chmod(elsewhere, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(vol, VolumeRootName)); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareVolumeRoot(vol, VolumeRootName); err == nil || !strings.Contains(err.Error(), filepath.Join(vol, VolumeRootName)) {
		t.Errorf("a symlink at the name: err %v; want an error naming it", err)
	}
	if st, _ := os.Stat(elsewhere); st.Mode().Perm() != 0o777 {
		t.Errorf("the symlink's target changed to %v", st.Mode().Perm())
	}
	vol2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol2, VolumeRootName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareVolumeRoot(vol2, VolumeRootName); err == nil {
		t.Error("a file at the name was accepted")
	}
}

// A directory someone else owns is not ours to narrow: refused, as the exporter would.
func TestPrepareVolumeRootLeavesAnotherUsersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the directory away")
	}
	vol := t.TempDir()
	root := filepath.Join(vol, VolumeRootName)
	if err := os.Mkdir(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	_, err := PrepareVolumeRoot(vol, VolumeRootName)
	var unsafe *UnsafeRootError
	if err == nil || !errors.As(err, &unsafe) {
		t.Errorf("another user's directory: err %v; want an UnsafeRootError", err)
	}
	if st, _ := os.Stat(root); st.Mode().Perm() != 0o777 {
		t.Errorf("its mode changed to %v", st.Mode().Perm())
	}
}
