package device

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// These tests use the real kernel: loop devices, partition tables and mounts. They need root
// and util-linux, e2fsprogs and fdisk (scripts/ensure-deps.sh installs them).

func requireLoopTools(t *testing.T, tools ...string) {
	t.Helper()
	testenv.RequireRoot(t) // creates loop devices and mounts filesystems
	for _, tool := range append([]string{"losetup", "mount", "umount"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/ensure-deps.sh installs it; sfdisk comes with the fdisk package)", tool)
		}
	}
}

func run(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newImage makes a sparse image file that t.TempDir removes after the loop device is gone.
func newImage(t *testing.T, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return img
}

// attachLoop attaches img to a free loop device and detaches exactly that device at cleanup,
// which runs after the cleanups registered later (the umounts).
func attachLoop(t *testing.T, img string, losetupArgs ...string) string {
	t.Helper()
	args := append([]string{"--find", "--show"}, losetupArgs...)
	dev := run(t, "", "losetup", append(args, img)...)
	if !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("losetup printed %q, want a /dev/loopN path", dev)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	return dev
}

// mountExt4 makes an ext4 on dev and mounts it on a fresh temp dir until cleanup.
func mountExt4(t *testing.T, dev string) string {
	t.Helper()
	run(t, "", "mkfs.ext4", "-q", "-F", dev)
	dir := t.TempDir()
	run(t, "", "mount", "-t", "ext4", dev, dir)
	t.Cleanup(func() { unmount(t, dir) })
	return dir
}

func unmount(t *testing.T, dir string) {
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v\n%s", dir, err, out)
		// Lazily, so that the loop device can still be detached and the temp dir removed.
		exec.Command("umount", "-l", dir).Run()
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("probe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkResolves(t *testing.T, path, wantName, wantDisk string) Info {
	t.Helper()
	info, err := Paths{}.Resolve(path)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", path, err)
	}
	if info.Name != wantName || info.Disk != wantDisk {
		t.Fatalf("Resolve(%s) = Name %q Disk %q, want %q %q (%+v)", path, info.Name, info.Disk, wantName, wantDisk, info)
	}
	return info
}

func devNumber(t *testing.T, node string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		t.Fatal(err)
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
}

func TestResolveFileOnLoopMountedExt4(t *testing.T) {
	requireLoopTools(t, "mkfs.ext4")
	dev := attachLoop(t, newImage(t, 64<<20))
	mnt := mountExt4(t, dev)
	file := filepath.Join(mnt, "data")
	writeFile(t, file)

	name := filepath.Base(dev)
	info := checkResolves(t, file, name, name)
	checkResolves(t, mnt, name, name)
	if maj, min := devNumber(t, dev); info.Major != maj || info.Minor != min {
		t.Errorf("numbers %d:%d, want the loop device's %d:%d", info.Major, info.Minor, maj, min)
	}
	if info.LogicalBlockSize != 512 {
		t.Errorf("LogicalBlockSize %d, want a loop device's default 512", info.LogicalBlockSize)
	}
}

func TestResolvePartitionOfLoopDeviceToItsDisk(t *testing.T) {
	requireLoopTools(t, "mkfs.ext4", "sfdisk", "partx")
	img := newImage(t, 64<<20)
	run(t, "label: gpt\n,,L\n", "sfdisk", "--quiet", img)
	dev := attachLoop(t, img, "--partscan")
	part := dev + "p1"
	if !waitForNode(part, 2*time.Second) {
		// Kernels built without partition table parsers (CONFIG_EFI_PARTITION off, as in some
		// microVMs) scan nothing; partx parses the table itself and adds the same kind of
		// partition through BLKPG, which is all Resolve looks at.
		t.Logf("kernel did not add %s from the table; adding it with partx", part)
		run(t, "", "partx", "--add", dev)
		t.Cleanup(func() { exec.Command("partx", "--delete", dev).Run() })
		if !waitForNode(part, 5*time.Second) {
			t.Fatalf("partition node %s did not appear", part)
		}
	}

	disk := filepath.Base(dev)
	info := checkResolves(t, part, disk+"p1", disk)
	if maj, min := devNumber(t, part); info.Major != maj || info.Minor != min {
		t.Errorf("numbers %d:%d, want the partition's %d:%d", info.Major, info.Minor, maj, min)
	}
	// The whole disk of a partitioned device is still itself.
	checkResolves(t, dev, disk, disk)

	mnt := mountExt4(t, part)
	file := filepath.Join(mnt, "data")
	writeFile(t, file)
	checkResolves(t, file, disk+"p1", disk)
}

// waitForNode waits for devtmpfs to create a device node, which it does asynchronously.
func waitForNode(node string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(node); err == nil {
			return true
		}
	}
	return false
}

func TestResolveRawLoopDeviceReportsItsOwnBlockSize(t *testing.T) {
	requireLoopTools(t)
	// A 4 KiB sector size tells a real sysfs read from the 512 default.
	dev := attachLoop(t, newImage(t, 16<<20), "--sector-size", "4096")
	name := filepath.Base(dev)
	info := checkResolves(t, dev, name, name)
	if info.LogicalBlockSize != 4096 {
		t.Errorf("LogicalBlockSize %d, want 4096", info.LogicalBlockSize)
	}

	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// What the read probes align to on it, with no sysfs figure to fall back on.
	n, err := probe.DirectIOAlignment(int(f.Fd()), dev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4096 {
		t.Errorf("O_DIRECT alignment %d, want 4096", n)
	}
}

func TestResolveRootFilesystemNamesADiskstatsDevice(t *testing.T) {
	info, err := Paths{}.Resolve("/")
	if err != nil {
		if strings.Contains(err.Error(), "no block device") {
			t.Skipf("this machine's root filesystem has no block device: %v", err)
		}
		t.Fatal(err)
	}
	if _, err := (Paths{}).ReadStats(info.Name); err != nil {
		t.Fatalf("root resolves to %+v, but: %v", info, err)
	}
	t.Logf("/ is on %+v", info)
}

func TestResolveTmpfsSaysItHasNoBlockDevice(t *testing.T) {
	dir := tmpfsMount(t)
	_, err := Paths{}.Resolve(dir)
	if err == nil || !strings.Contains(err.Error(), "tmpfs at "+dir+" has no block device") {
		t.Fatalf("Resolve(%s) on tmpfs: want a no-block-device error, got %v", dir, err)
	}
	t.Log(err)
}

// tmpfsMount mounts a tmpfs of our own as root; otherwise (and under -short, which mounts
// nothing) it borrows one the machine has.
func tmpfsMount(t *testing.T) string {
	t.Helper()
	if os.Geteuid() == 0 && !testing.Short() {
		dir := t.TempDir()
		run(t, "", "mount", "-t", "tmpfs", "-o", "size=1m", "diskprobe-test", dir)
		t.Cleanup(func() { unmount(t, dir) })
		return dir
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		fields := strings.Fields(s.Text())
		for i, field := range fields {
			if field == "-" && i+1 < len(fields) && fields[i+1] == "tmpfs" && !strings.Contains(fields[4], `\`) {
				return fields[4]
			}
		}
	}
	t.Skip("not root, and no tmpfs mounted to borrow")
	return ""
}

func TestReadStatsCountsDirectReadsAndNoWrites(t *testing.T) {
	requireLoopTools(t, "dd")
	// Nothing is mounted on it, so nothing but our dd touches the device.
	dev := attachLoop(t, newImage(t, 16<<20))
	name := filepath.Base(dev)
	p := Paths{}
	before, err := p.ReadStats(name)
	if err != nil {
		t.Fatal(err)
	}
	// O_DIRECT at queue depth 1: each 4 KiB read is one completed request, none merged or cached.
	run(t, "", "dd", "if="+dev, "of=/dev/null", "bs=4k", "count=100", "iflag=direct", "status=none")
	after, err := p.ReadStats(name)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.ReadIOs - before.ReadIOs; d < 100 || d > 110 {
		t.Errorf("ReadIOs rose by %d, want about 100", d)
	}
	if d := after.ReadSectors - before.ReadSectors; d < 800 {
		t.Errorf("ReadSectors rose by %d, want at least 800 (100 × 4 KiB)", d)
	}
	if after.WriteIOs != before.WriteIOs || after.WriteSectors != before.WriteSectors {
		t.Errorf("writes changed: %d→%d IOs, %d→%d sectors", before.WriteIOs, after.WriteIOs, before.WriteSectors, after.WriteSectors)
	}
	if after.IOTicks < before.IOTicks {
		t.Errorf("IOTicks went backwards: %v → %v", before.IOTicks, after.IOTicks)
	}
	t.Logf("%s: before %+v after %+v", name, before, after)
}

func ExamplePaths_Resolve() {
	info, err := Paths{ProcFS: "/proc", SysFS: "/sys"}.Resolve("/var/lib/etcd")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Name, info.Disk, info.Model, info.Rotational)
}
