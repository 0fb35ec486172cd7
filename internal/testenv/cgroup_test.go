package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A cgroup named for a pid that is gone is removed by the next test's cgroup; one named for
// a live process, or holding a process, is left alone.
func TestNewCgroupRemovesWhatAKilledRunLeft(t *testing.T) {
	RequireRoot(t)
	root := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Skip("needs the cgroup v1 blkio controller at " + root)
	}
	stale := filepath.Join(root, "diskprobe-test-999999999-1") // above pid_max: never a live pid
	live := filepath.Join(root, fmt.Sprintf("diskprobe-test-%d-1", os.Getppid()))
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(stale); os.Remove(live) })
	newCgroup(t, root)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s, left by a pid that is gone, is still there (%v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("%s, named for a live process, was removed: %v", live, err)
	}
}
