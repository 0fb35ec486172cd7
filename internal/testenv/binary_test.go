package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Main returns the run's exit code and removes the binary's directory after the run.
func TestMainRemovesTheBinaryAfterTheRun(t *testing.T) {
	saved := binaryDir
	t.Cleanup(func() { binaryDir = saved })
	binaryDir = filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(binaryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if code := Main(func() int { return 3 }); code != 3 {
		t.Errorf("Main returned %d, want the run's 3", code)
	}
	if _, err := os.Stat(binaryDir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Main (%v)", binaryDir, err)
	}
}

// A binary directory named for a pid that is gone is what a killed run left; one named for a
// live process is another run's, and this process's own is never listed.
func TestLeftBehindListsOnlyDeadProcessesPaths(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "diskprobe-bin-")
	stale := prefix + "999999999-12" // above pid_max: never a live pid
	live := fmt.Sprintf("%s%d-34", prefix, os.Getppid())
	own := fmt.Sprintf("%s%d-56", prefix, os.Getpid())
	for _, d := range []string{stale, live, own, prefix + "notapid"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := leftBehind(prefix); !slices.Equal(got, []string{stale}) {
		t.Errorf("leftBehind = %q, want only %q", got, stale)
	}
}
