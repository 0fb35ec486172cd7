package k8senv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDisk is a loop device of size bytes over a sparse file in /dev/shm (only what is written
// takes memory, and no flush waits on this machine's own disk), made for a test while the
// cluster runs: a volume a provisioner hands out, a raw device a local PersistentVolume names.
// The file is recorded like the nodes' disks, so a run killed before its cleanups has the
// device detached and the file removed by the next teardown; the test's cleanup (Cleanup:
// also on SIGINT) detaches and removes them first.
func (c *Cluster) TestDisk(t testing.TB, name string, size int64) string {
	t.Helper()
	image := filepath.Join("/dev/shm", "diskprobe-k8s-test-"+strings.ReplaceAll(name, "/", "-")+".img")
	if err := c.record("image", image); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("test disk %s: %v", name, err)
	}
	var dev string
	Cleanup(t, func() {
		// Detached at once (a device still open, by a mount a failed test left, is retried
		// briefly); detachLoops then finds any other device over the file.
		for i := 0; dev != "" && i < 50; i++ {
			if exec.Command("losetup", "-d", dev).Run() == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := detachLoops(image); err != nil {
			t.Errorf("test disk %s: %v", name, err)
		}
		if err := os.Remove(image); err != nil && !os.IsNotExist(err) {
			t.Errorf("test disk %s: %v", name, err)
		}
	})
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	_ = f.Close()
	out, err := exec.Command("losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", image, err, out)
	}
	dev = strings.TrimSpace(string(out))
	return dev
}

// SharedExt4 is a TestDisk with an ext4 on it mounted at SharedDir/name, which every node
// sees at the same path: a directory of its own disk for a node-local provisioner. The
// filesystem is unmounted in cleanup (before the device is detached), and by a teardown after
// a killed run (it is under RunDir).
func (c *Cluster) SharedExt4(t testing.TB, name string, size int64) (dev, dir string) {
	t.Helper()
	dev = c.TestDisk(t, name, size)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	dir = filepath.Join(SharedDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(dev, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mounting %s on %s: %v", dev, dir, err)
	}
	Cleanup(t, func() {
		// A container still holding it (a failed test's pod) lets go soon after it is killed.
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Unmount(dir, 0); err == nil || err == syscall.EINVAL {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil && err != syscall.EINVAL {
			t.Errorf("unmounting %s: %v", dir, err)
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("lazy unmount of %s: %v", dir, err)
			}
		}
		_ = os.Remove(dir)
	})
	return dev, dir
}
