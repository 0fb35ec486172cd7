package ebsnvme

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// From <linux/nvme_ioctl.h>.
const (
	ioctlID       = 0x4E40     // NVME_IOCTL_ID, _IO('N', 0x40): the namespace ID of a namespace block device
	ioctlAdminCmd = 0xC0484E41 // NVME_IOCTL_ADMIN_CMD, _IOWR('N', 0x41, struct nvme_admin_cmd)

	opGetLogPage = 0x02 // NVMe admin opcode Get Log Page
)

// passthruCmd is struct nvme_passthru_cmd (= nvme_admin_cmd), 72 bytes; the fields a Get
// Log Page leaves at zero are blank.
type passthruCmd struct {
	opcode  uint8
	_       [3]uint8 // flags, rsvd1
	nsid    uint32
	_       [2]uint32 // cdw2, cdw3
	_       uint64    // metadata
	addr    uint64
	_       uint32 // metadata_len
	dataLen uint32
	cdw10   uint32
	_       [5]uint32 // cdw11-cdw15
	_       uint32    // timeout_ms: 0, the kernel's admin timeout
	_       uint32    // result
}

// ErrNotNVMe is the refusal of a device that is not an NVMe namespace: its driver does
// not know NVME_IOCTL_ID (a loop device, a SCSI disk, a Xen or virtio disk).
var ErrNotNVMe = errors.New("not an NVMe namespace")

// StatusError is an NVMe command the device completed with an error status: a controller
// that has no log page 0xD0 answers Invalid Log Page (0x109).
type StatusError struct {
	Path   string
	Status uint32
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: Get Log Page 0x%X: NVMe status 0x%X", e.Path, LogPageID, e.Status)
}

// Read asks the NVMe namespace block device at path (/dev/nvmeXnY), which must be the
// device major:minor, for its EBS statistics page and decodes it. It opens the node
// read-only, checks that it is that block device, asks the driver for the namespace ID
// (NVME_IOCTL_ID, which the driver answers without a command to the device and other
// drivers refuse: ErrNotNVMe) and sends one Get Log Page admin command. The kernel lets
// only a process with CAP_SYS_ADMIN send it: without, the error is a permission error
// (errors.Is fs.ErrPermission).
//
// The command waits for the device with the kernel's admin timeout (nvme_core.admin_timeout,
// 60 s by default), not a shorter one of ours: a timed-out admin command makes the driver
// reset the controller, which a statistics read must never cause. Callers that must not wait
// that long (a scrape) call it from a goroutine of its own and keep at most one outstanding.
func Read(path string, major, minor uint32) (Stats, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Stats{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Stats{}, fmt.Errorf("%s: %w: not a block device", path, ErrNotNVMe)
	}
	if got := uint64(st.Rdev); unix.Major(got) != major || unix.Minor(got) != minor {
		return Stats{}, fmt.Errorf("%s is device %d:%d, not the volume's %d:%d (a /dev that is not the host's?)", path, unix.Major(got), unix.Minor(got), major, minor)
	}
	nsid, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlID, 0)
	if errno != 0 {
		return Stats{}, fmt.Errorf("%s: %w (NVME_IOCTL_ID: %w)", path, ErrNotNVMe, errno)
	}

	// The page lives outside the Go heap, so that nothing can move or free it while the
	// device writes to it.
	page, err := unix.Mmap(-1, 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return Stats{}, fmt.Errorf("mapping a page for the log: %w", err)
	}
	defer func() { _ = unix.Munmap(page) }()
	cmd := passthruCmd{
		opcode:  opGetLogPage,
		nsid:    uint32(nsid),
		addr:    uint64(uintptr(unsafe.Pointer(&page[0]))),
		dataLen: PageSize,
		// Log page ID, and the number of dwords minus one (NUMDL, 0's based) in the upper half.
		cdw10: LogPageID | (PageSize/4-1)<<16,
	}
	status, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	switch {
	case errno != 0:
		return Stats{}, &os.PathError{Op: "NVMe Get Log Page 0xD0", Path: path, Err: errno}
	case status != 0:
		return Stats{}, &StatusError{Path: path, Status: uint32(status)}
	}
	s, err := Parse(page)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
