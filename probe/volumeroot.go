package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// VolumeRootName is the directory of a storage class's volume that its probe pod probes
// (the chart mounts it by subPath).
const VolumeRootName = "diskprobe"

// PrepareVolumeRoot makes volume/name a probe root the exporter accepts (rootSafe), for a
// volume that is the pod's alone: a storage class's PVC, whose root a provisioner may
// have made writable by all (local-path makes it 0777), which rootSafe rightly refuses as
// a probe root. The directory is made 0755, or, if it is there, owned by the caller or
// root and left group- or world-writable, narrowed with fchmod on its descriptor (never by
// path, never through a symlink). It answers what it did, for the init container's log.
func PrepareVolumeRoot(volume, name string) (string, error) {
	path := filepath.Join(volume, name)
	volFD, err := openFD(volume, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: volume, Err: err}
	}
	defer func() { _ = unix.Close(volFD) }()
	did := "made " + path + " (mode 0755)"
	err = ignoringEINTR(func() error { return unix.Mkdirat(volFD, name, 0o755) })
	if errors.Is(err, unix.EEXIST) {
		did = path + " was there"
	} else if err != nil {
		return "", &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	fd, err := openAt(volFD, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return "", &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	// The umask may have left it wider or narrower than asked; only a mode others could
	// swap entries under is changed.
	if uid := int(st.Uid); (uid == os.Geteuid() || uid == 0) && othersCanSwap(st.Mode) {
		mode := st.Mode & 0o7777 &^ 0o022
		if err := ignoringEINTR(func() error { return unix.Fchmod(fd, mode) }); err != nil {
			return "", fmt.Errorf("narrowing the probe root: %w", &os.PathError{Op: "chmod", Path: path, Err: err})
		}
		did += fmt.Sprintf(", mode %04o narrowed to %04o", st.Mode&0o7777, mode)
		st.Mode = st.Mode&^0o7777 | mode
	}
	if err := rootSafe(path, &st); err != nil {
		return "", err
	}
	return did, nil
}
