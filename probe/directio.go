package probe

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Filesystems whose "disk" is memory: a probe there measures RAM, not storage.
var memoryFilesystems = map[int64]string{
	unix.TMPFS_MAGIC:      "tmpfs",
	unix.RAMFS_MAGIC:      "ramfs",
	unix.PROC_SUPER_MAGIC: "proc",
	unix.SYSFS_MAGIC:      "sysfs",
}

// CheckDirectIO tells, before any file is written, whether read probes can run in dir:
// the filesystem must be backed by a device and must take O_DIRECT. tmpfs on recent
// kernels accepts O_DIRECT but is memory; it is refused by name (CheckOnDisk).
func CheckDirectIO(dir string) error { return CheckOnDisk(dir, false, true) }

// DirectIOAlignment is the offset and memory alignment O_DIRECT needs on fd: from
// statx(STATX_DIOALIGN) where the kernel and filesystem report it (Linux ≥ 6.1), else
// fallback (the device's logical block size). A filesystem that reports alignment 0
// does not support O_DIRECT on this file.
func DirectIOAlignment(fd int, path string, fallback int64) (int64, error) {
	var st unix.Statx_t
	err := ignoringEINTR(func() error { return unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st) })
	if err == nil && st.Mask&unix.STATX_DIOALIGN != 0 {
		if st.Dio_offset_align == 0 {
			return 0, fmt.Errorf("%s: the filesystem does not support O_DIRECT", path)
		}
		return int64(max(st.Dio_offset_align, st.Dio_mem_align)), nil
	}
	if fallback > 0 {
		return fallback, nil
	}
	var sz int
	if err := ignoringEINTR(func() (err error) { sz, err = unix.IoctlGetInt(fd, unix.BLKSSZGET); return err }); err == nil && sz > 0 {
		return int64(sz), nil
	}
	return 512, nil
}

// alignedBuffer is page-aligned memory from mmap, so it satisfies any O_DIRECT memory
// alignment without per-operation allocation.
func alignedBuffer(size int) ([]byte, error) {
	page := os.Getpagesize()
	n := (size + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocating %d-byte I/O buffer: %w", n, err)
	}
	return b[:size], nil
}

func freeBuffer(b []byte) {
	if b != nil {
		_ = unix.Munmap(b[:cap(b)])
	}
}

// setDirect switches the probe file open at fd to O_DIRECT with fcntl(F_SETFL), which
// Linux allows for O_DIRECT: the file is never opened again by its path, which someone
// may have pointed elsewhere since it was checked.
func setDirect(fd int, path string) error {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return openDirectError(path, err)
	}
	return nil
}

// openDirectError explains the errors users meet when opening with O_DIRECT.
func openDirectError(path string, err error) error {
	switch {
	case errors.Is(err, unix.EINVAL):
		return &explained{fmt.Sprintf("%s: the filesystem refuses O_DIRECT, which read probes need to bypass the page cache", path), err}
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return &explained{fmt.Sprintf("permission denied opening %s read-only: the exporter's user needs read access to the device, through the group that owns it (usually `disk`) or CAP_DAC_READ_SEARCH; "+
			"the packaged systemd unit grants neither: add the drop-in /etc/systemd/system/diskprobe_exporter.service.d/devices.conf with SupplementaryGroups=disk and DeviceAllow=%s r "+
			"(example: /usr/share/doc/diskprobe-exporter/examples/devices.conf), then systemctl daemon-reload && systemctl restart diskprobe_exporter", path, path), err}
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// explained is an errno with a message that says what to do about it; errors.Is still
// sees the errno (the daemon's /-/ready tells permission denied from passing errors).
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }
