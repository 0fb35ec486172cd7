package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The writer pod's command: one line, exit 0, nothing left in the directory.
func TestArrivalWrite(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runMain(t, "arrival-write", dir)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "wrote 4096 bytes to "+filepath.Join(dir, ".diskprobe-arrival")) {
		t.Errorf("arrival-write %s: exit %d, stdout %q, stderr %q; want one line, exit 0", dir, code, out, errOut)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %v in the volume", left)
	}
}

// A volume it cannot write in: exit 1 and the reason, naming the file.
func TestArrivalWriteReadOnly(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// Root writes through permissions: a read-only mount, as a volume mounted ro.
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	} else if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runMain(t, "arrival-write", dir)
	want := filepath.Join(dir, ".diskprobe-arrival")
	saysWhy := strings.Contains(errOut, "read-only file system") || strings.Contains(errOut, "permission denied")
	if code != 1 || !strings.Contains(errOut, want) || !saysWhy {
		t.Errorf("arrival-write on a read-only directory: exit %d, stderr %q; want 1 and the reason naming %s", code, errOut, want)
	}
}

// The arrival command's usage errors exit 2 naming the flag; serve's flags are refused.
func TestArrivalUsageErrors(t *testing.T) {
	for args, want := range map[string]string{
		"arrival --image=i": "--storage-class",
		"arrival --storage-class=a --storage-class=a --image=i":          "given twice",
		"arrival --storage-class=a --image=i --size=lots":                "--size",
		"arrival --storage-class=a --image=i --owner-pod-name=p":         "--owner-pod-uid",
		"arrival --storage-class=a --image=i --config.file=x.yml":        "--config.file is the exporter's flag",
		"arrival --storage-class=a --image=i --access-mode=ReadOnlyMany": "access-mode",
	} {
		_, errOut, code := runMain(t, strings.Fields(args)...)
		if code != exitError || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, stderr %q; want %d naming %s", args, code, errOut, exitError, want)
		}
	}
}
