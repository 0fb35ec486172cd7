package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FillRandom writes size bytes of random data at the start of dev with O_DIRECT and waits
// for them to reach the device, so that later reads are real reads of written blocks and
// not of the holes of a sparse image. Where udev runs, closing the written device makes it
// probe the device (blkid reads); that is waited for, so it does not land in a test's
// measurements.
func FillRandom(t testing.TB, dev string, size int64) {
	t.Helper()
	RequireTools(t, "dd")
	Run(t, "dd", "if=/dev/urandom", "of="+dev, "bs=1M", fmt.Sprintf("count=%d", size>>20), "oflag=direct", "conv=fsync", "status=none")
	if _, err := exec.LookPath("udevadm"); err == nil {
		exec.Command("udevadm", "settle", "--timeout=10").Run()
	}
}

// PartitionedLoopDevice is a loop device of size bytes with a GPT table holding one
// partition that spans it, attached with --partscan. Kernels built without partition
// table parsers scan nothing; partx then adds the partition through BLKPG. It returns the
// disk and its first partition (/dev/loopN, /dev/loopNp1); both go away in cleanup.
func PartitionedLoopDevice(t testing.TB, size int64) (disk, part string) {
	t.Helper()
	RequireRoot(t)
	RequireTools(t, "losetup", "sfdisk", "partx")
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	sfdisk := exec.Command("sfdisk", "--quiet", img)
	sfdisk.Stdin = strings.NewReader("label: gpt\n,,L\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk %s: %v\n%s", img, err, out)
	}
	disk = Run(t, "losetup", "--find", "--show", "--direct-io=on", "--partscan", img)
	t.Cleanup(func() {
		for i := 0; i < 20; i++ {
			if exec.Command("losetup", "-d", disk).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not detach %s", disk)
	})
	part = disk + "p1"
	if !waitForDeviceNode(part, 2*time.Second) {
		Run(t, "partx", "--add", disk)
		t.Cleanup(func() { exec.Command("partx", "--delete", disk).Run() })
		if !waitForDeviceNode(part, 5*time.Second) {
			t.Fatalf("partition node %s did not appear after partx --add", part)
		}
	}
	return disk, part
}

func waitForDeviceNode(path string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
