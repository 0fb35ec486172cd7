package inspect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/prometheus/procfs"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// ProbeDir says whether probeDir may hold the probe files that measure path's
// filesystem: an existing directory, not a symlink, on the same filesystem (the same
// device number: two bind mounts of one filesystem are one filesystem, which is how a
// container sees two host paths; a bind mount of another filesystem is not), and
//
//   - beside path, so that nothing is written in another program's data directory; or,
//   - when path is the root of its filesystem (a disk mounted there, as production guides
//     recommend for etcd), where nothing beside it is on that disk: directly under path
//     (one entry there, which etcd names in a warning at its start and otherwise ignores),
//     holding nothing but the exporter's .diskprobe, and named neither member nor proxy
//     (etcd's own entries: a proxy directory beside member stops etcd from starting) nor
//     lost+found (the filesystem's own).
//
// A block device (typ) takes no probe directory: nothing is ever written for one. The
// exporter's config and check's --probe-dir both refuse through here.
func ProbeDir(typ config.TargetType, path, probeDir string) error {
	if err := config.ProbeDirRefusedOn(typ, path); err != nil {
		return err
	}
	inside := probeDir == path || strings.HasPrefix(probeDir, path+string(filepath.Separator))
	if inside {
		m, err := mountAt(path)
		if err != nil {
			return err
		}
		switch {
		case probeDir == path && m.filesystemRoot():
			return fmt.Errorf("%s is the measured path itself: it is the root of its filesystem, so nothing beside it is on that disk and the probe directory may be inside it, but only directly under it (one entry there, e.g. %s)",
				probeDir, filepath.Join(path, config.ProbeDirName))
		case !m.filesystemRoot():
			return fmt.Errorf("%s is inside the measured path %s, which is not the root of its filesystem: probe_dir exists so that nothing is written there; %s",
				probeDir, path, m.besideAdvice(path))
		case filepath.Dir(probeDir) != path:
			return fmt.Errorf("%s is not directly under %s: the measured path is the root of its filesystem, so nothing beside it is on that disk and the probe directory may be inside it, but only directly under it (one entry there, e.g. %s)",
				probeDir, path, filepath.Join(path, config.ProbeDirName))
		case filepath.Base(probeDir) == "member" || filepath.Base(probeDir) == "proxy":
			return fmt.Errorf("%s is named as etcd's own entries in its data directory (member, proxy): use another directory directly under %s, e.g. %s",
				probeDir, path, filepath.Join(path, config.ProbeDirName))
		case filepath.Base(probeDir) == "lost+found":
			return fmt.Errorf("%s is the filesystem's own directory (fsck puts what it recovers there): use another directory directly under %s, e.g. %s",
				probeDir, path, filepath.Join(path, config.ProbeDirName))
		}
	}
	var dirSt, pathSt unix.Stat_t
	if err := unix.Lstat(probeDir, &dirSt); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s does not exist: create it for the exporter (e.g. install -d -m 0700 %s)", probeDir, probeDir)
		}
		return &os.PathError{Op: "lstat", Path: probeDir, Err: err}
	}
	switch dirSt.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return fmt.Errorf("%s is a symlink: probe_dir must be a real directory, so that the probe files cannot be sent elsewhere", probeDir)
	default:
		return fmt.Errorf("%s is not a directory", probeDir)
	}
	if err := unix.Stat(path, &pathSt); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if dirSt.Dev != pathSt.Dev {
		advice := "probe_dir must be on the measured path's"
		if m, err := mountAt(path); err == nil {
			advice += ": " + m.besideAdvice(path)
		}
		return fmt.Errorf("%s is on another filesystem (device %d:%d) than %s (device %d:%d): probe files measure the filesystem they are on, so %s",
			probeDir, unix.Major(dirSt.Dev), unix.Minor(dirSt.Dev), path, unix.Major(pathSt.Dev), unix.Minor(pathSt.Dev), advice)
	}
	if inside {
		return onlyProbeFiles(probeDir)
	}
	return nil
}

// onlyProbeFiles refuses a probe directory inside the measured path that holds anything
// but the exporter's own .diskprobe: it would be a directory of the program whose data
// the path holds.
func onlyProbeFiles(probeDir string) error {
	f, err := os.Open(probeDir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return &os.PathError{Op: "readdir", Path: probeDir, Err: err}
	}
	for _, name := range names {
		if name != probe.DirName {
			return fmt.Errorf("%s holds %q: a probe directory inside the measured path must be the exporter's own, holding nothing but its .diskprobe; create an empty one (e.g. install -d -m 0700 %s)",
				probeDir, name, filepath.Join(filepath.Dir(probeDir), config.ProbeDirName))
		}
	}
	return nil
}

// mount is the entry of /proc/self/mountinfo whose mount point is a path, if any.
type mount struct {
	point   bool   // a filesystem is mounted at the path
	root    string // the directory of that filesystem shown there: "/" for all of it
	fstype  string
	subvolR bool // a btrfs subvolume's root: its own device number, as a filesystem's root
}

// filesystemRoot reports whether the whole of a filesystem (or of a btrfs subvolume,
// which has a device number of its own) is mounted at the path, so that nothing beside
// the path is on it.
func (m mount) filesystemRoot() bool { return m.point && (m.root == "/" || m.subvolR) }

// besideAdvice says where a probe directory for path can go when it cannot go inside.
func (m mount) besideAdvice(path string) string {
	switch {
	case m.filesystemRoot():
		return fmt.Sprintf("%s is the root of its filesystem (a disk of its own is mounted there), so nothing beside it is on that disk: use a directory directly under it, e.g. %s (install -d -m 0700 %s)",
			path, filepath.Join(path, config.ProbeDirName), filepath.Join(path, config.ProbeDirName))
	case m.point:
		return fmt.Sprintf("%s is a mount of the directory %s of its filesystem, so nothing beside it is on that filesystem: bind-mount another directory of that filesystem beside it and use that", path, m.root)
	}
	return fmt.Sprintf("put it beside it on the same filesystem (e.g. %s)", filepath.Join(filepath.Dir(path), "diskprobe-"+filepath.Base(path)))
}

// mountAt reads this process's mount table for the mount at path (symlinks resolved).
// It reads the table, never the mounted filesystems; only resolving symlinks asks them.
func mountAt(path string) (mount, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return mount{}, err
	}
	mounts, err := procfs.GetMounts() // this process's view, where path is as the config names it
	if err != nil {
		return mount{}, err
	}
	var m mount
	for _, mi := range mounts {
		// Later entries for one mount point are mounted over earlier ones.
		if device.UnescapeMountinfo(mi.MountPoint) == real {
			m = mount{point: true, root: device.UnescapeMountinfo(mi.Root), fstype: mi.FSType}
		}
	}
	if m.point && m.fstype == "btrfs" && m.root != "/" {
		// A subvolume's root directory is always inode 256 (BTRFS_FIRST_FREE_OBJECTID).
		var st unix.Stat_t
		if err := unix.Stat(real, &st); err == nil && st.Ino == 256 {
			m.subvolR = true
		}
	}
	return m, nil
}
