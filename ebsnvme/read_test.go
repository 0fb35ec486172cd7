package ebsnvme

import (
	"errors"
	"io/fs"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// The ioctl hands the kernel this struct as struct nvme_passthru_cmd: a field at the
// wrong offset would send the device another command.
func TestPassthruCmdIsTheKernelsStruct(t *testing.T) {
	var c passthruCmd
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(c), 72},
		{"nsid", unsafe.Offsetof(c.nsid), 4},
		{"addr", unsafe.Offsetof(c.addr), 24},
		{"data_len", unsafe.Offsetof(c.dataLen), 36},
		{"cdw10", unsafe.Offsetof(c.cdw10), 40},
	} {
		if f.got != f.want {
			t.Errorf("nvme_passthru_cmd %s: %d, want %d", f.name, f.got, f.want)
		}
	}
	// _IOWR('N', 0x41, 72 bytes): the ioctl number carries the struct's size.
	if want := uintptr(3<<30 | 72<<16 | 'N'<<8 | 0x41); ioctlAdminCmd != want {
		t.Errorf("NVME_IOCTL_ADMIN_CMD 0x%X, want 0x%X", ioctlAdminCmd, want)
	}
}

// There is no NVMe device on the machines this runs on: what can be checked is that every
// other block device is refused at NVME_IOCTL_ID, before any admin command is sent, and
// that a node that is not the expected device is refused before any ioctl.
func TestReadRefusesABlockDeviceThatIsNotNVMe(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "losetup")
	dev := testenv.LoopDevice(t, 8<<20)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))

	_, err := Read(dev, major, minor)
	if !errors.Is(err, ErrNotNVMe) {
		t.Errorf("Read(%s): %v, want ErrNotNVMe", dev, err)
	}
	t.Logf("refused: %v", err)

	if _, err := Read(dev, major, minor+1); err == nil || errors.Is(err, ErrNotNVMe) {
		t.Errorf("Read(%s) as another device number: %v, want a device number mismatch", dev, err)
	}
	if _, err := Read("/dev/null", 1, 3); !errors.Is(err, ErrNotNVMe) {
		t.Errorf("Read(/dev/null): %v, want ErrNotNVMe (not a block device)", err)
	}
	if _, err := Read("/dev/nvme-that-does-not-exist", 259, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing node: %v, want not-exist", err)
	}
}

// The read must never open the volume for writing: a read-only open is harmless to it, and
// its close is not the IN_CLOSE_WRITE that makes udev probe a device again (blkid reads,
// change events). inotify sees which close it was.
func TestReadOpensTheDeviceReadOnly(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "losetup")
	dev := testenv.LoopDevice(t, 8<<20)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dev, unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dev, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))); !errors.Is(err, ErrNotNVMe) {
		t.Fatalf("Read(%s): %v, want ErrNotNVMe", dev, err)
	}
	buf := make([]byte, 4096)
	n, err := unix.Read(in, buf)
	if err != nil {
		t.Fatalf("no close of %s seen by inotify: %v", dev, err)
	}
	var nowrite, write int
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if ev.Mask&unix.IN_CLOSE_WRITE != 0 {
			write++
		}
		if ev.Mask&unix.IN_CLOSE_NOWRITE != 0 {
			nowrite++
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if write != 0 || nowrite != 1 {
		t.Errorf("Read closed %s %d times after writing opens and %d after read-only ones; want one read-only", dev, write, nowrite)
	}
}
