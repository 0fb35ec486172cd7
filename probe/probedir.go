package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeDir is a probe directory, <root>/.diskprobe, held open. Every file of a probe is
// created, opened and removed relative to this descriptor, never by a path: whoever can
// rename entries of root (or of any directory above it) may move .diskprobe away and put
// a directory of their own, holding a symlink, a hard link or a device node, at its name,
// and a path looked up again would then lead the next write there. The held descriptor
// keeps pointing at the directory the exporter made and checked; ensure notices the swap
// and stops the probe with an error naming the path.
type probeDir struct {
	root  string // the target's path or probe_dir, as configured
	path  string // root/.diskprobe, for messages
	cpath []byte // path, NUL-terminated once, for the per-round lookup (statxPath)
	fd    int    // -1 until open
	id    fileID
}

// openProbeDir makes root/.diskprobe (mode 0700) or takes the one there once it has
// checked it is ours, and holds it open.
func openProbeDir(root string) (*probeDir, error) {
	d := &probeDir{root: root, path: filepath.Join(root, DirName), fd: -1}
	d.cpath = append([]byte(d.path), 0)
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

// open makes and opens the directory. The root is looked up by its path, which the
// configuration gives, and checked on its descriptor as CheckProbeRoot checked it at load
// (rootSafe: its mode may have changed since); .diskprobe itself is made and
// opened relative to the root's descriptor without following a symlink, then checked on
// the descriptor: a directory, owned by the exporter's user. A mode left too open by an
// older version is narrowed with fchmod on that descriptor, never by a path.
func (d *probeDir) open() error {
	rootFD, err := openFD(d.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("opening probe root: %w", &os.PathError{Op: "open", Path: d.root, Err: err})
	}
	defer func() { _ = unix.Close(rootFD) }()
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(rootFD, &st) }); err != nil {
		return &os.PathError{Op: "fstat", Path: d.root, Err: err}
	}
	if err := rootSafe(d.root, &st); err != nil {
		return err
	}
	err = ignoringEINTR(func() error { return unix.Mkdirat(rootFD, DirName, 0o700) })
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating probe directory: %w", &os.PathError{Op: "mkdir", Path: d.path, Err: err})
	}
	fd, err := openAt(rootFD, DirName, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// O_DIRECTORY|O_NOFOLLOW answers ENOTDIR for a symlink too: say which it is.
		reason := "it is not a directory"
		if ignoringEINTR(func() error { return unix.Fstatat(rootFD, DirName, &st, unix.AT_SYMLINK_NOFOLLOW) }) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			reason = "it is a symlink"
		}
		return &ForeignFileError{Path: d.path, Reason: reason}
	case err != nil:
		return &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		_ = unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: d.path, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		_ = unix.Close(fd)
		return &ForeignFileError{Path: d.path, Reason: fmt.Sprintf("it is owned by uid %d, not by the exporter's uid %d", st.Uid, os.Geteuid())}
	}
	if st.Mode&0o777 != 0o700 {
		if err := ignoringEINTR(func() error { return unix.Fchmod(fd, 0o700) }); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("restricting probe directory: %w", &os.PathError{Op: "chmod", Path: d.path, Err: err})
		}
	}
	var stx unix.Statx_t
	if err := statxFD(fd, &stx); err != nil {
		_ = unix.Close(fd)
		return &os.PathError{Op: "statx", Path: d.path, Err: err}
	}
	d.fd, d.id = fd, idOfStatx(&stx)
	return nil
}

// rootSafe refuses a probe root that a user other than the exporter's or root can rename
// entries of: anyone with write access to it (without the sticky bit) could swap
// .diskprobe, and though the held descriptor keeps every write where it belongs, the
// exporter would measure nothing until they stop. st is the root's fstat.
func rootSafe(root string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &os.PathError{Op: "open", Path: root, Err: unix.ENOTDIR}
	}
	if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
		return &UnsafeRootError{Root: root, Reason: fmt.Sprintf("it is owned by uid %d, neither the exporter's (uid %d) nor root", uid, os.Geteuid()),
			Fix: fmt.Sprintf("give it to the exporter's user (chown %d %s) or use a probe_dir of its own", os.Geteuid(), root)}
	}
	if othersCanSwap(st.Mode) {
		who := "others"
		if st.Mode&0o002 == 0 {
			who = "its group"
		}
		return &UnsafeRootError{Root: root, Reason: fmt.Sprintf("%s can write it (mode %04o) and it has no sticky bit, so they could swap the probe directory", who, st.Mode&0o7777),
			Fix: fmt.Sprintf("chmod go-w %s (or chmod +t, as /tmp has), or use a probe_dir of its own", root)}
	}
	return nil
}

// othersCanSwap says whether a directory of mode lets group or others rename its entries:
// writable by them, without the sticky bit that limits renames to the entries' owners.
func othersCanSwap(mode uint32) bool { return mode&0o022 != 0 && mode&unix.S_ISVTX == 0 }

// UnsafeRootError is a probe root that someone besides the exporter's user and root could
// change under it. The exporter writes nothing there.
type UnsafeRootError struct {
	Root, Reason, Fix string
}

func (e *UnsafeRootError) Error() string {
	return fmt.Sprintf("refusing to keep probe files in %s: %s; %s", e.Root, e.Reason, e.Fix)
}

// ReplacedDirError is a probe directory that was moved away or replaced while the
// exporter held it open: someone renamed entries of the probe root. The probe writes
// nothing until the path names the held directory again, or that directory is deleted.
type ReplacedDirError struct{ Path string }

func (e *ReplacedDirError) Error() string {
	return fmt.Sprintf("%s was moved or replaced while the exporter held it open; its probes are stopped until it is back "+
		"(nothing was written to what is there now: if nobody should have done that, find out who can rename entries of %s)", e.Path, filepath.Dir(e.Path))
}

// ensure checks, once a round, that the path still names the held directory. A held
// directory that was deleted (the target's directory removed and perhaps made again) is
// let go and the directory made afresh, as at start; one still linked elsewhere while
// another object has its name is a swap, and an error. Its two statx calls hang on a hung
// filesystem as writes do: a round makes it untimed.
func (d *probeDir) ensure() error {
	if d.fd < 0 {
		return d.open()
	}
	var held, now unix.Statx_t
	if err := statxFD(d.fd, &held); err != nil {
		return &os.PathError{Op: "statx", Path: d.path, Err: err}
	}
	if held.Nlink == 0 {
		d.close()
		return d.open()
	}
	err := statxPath(d.cpath, &now)
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
		return &os.PathError{Op: "statx", Path: d.path, Err: err}
	}
	if err != nil || idOfStatx(&now) != d.id {
		return &ReplacedDirError{Path: d.path}
	}
	return nil
}

// close lets the directory go; ensure opens it again.
func (d *probeDir) close() {
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
		d.fd = -1
	}
}

// filePath is the path of the probe file name, for messages only: nothing is opened by it.
func (d *probeDir) filePath(name string) string { return filepath.Join(d.path, name) }

// openAt opens name relative to dirFD without following a symlink, without blocking on a
// FIFO or taking a terminal, close-on-exec. The caller fstats the descriptor before any I/O.
func openAt(dirFD int, name string, flags int) (fd int, err error) {
	err = ignoringEINTR(func() error {
		fd, err = unix.Openat(dirFD, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
		return err
	})
	return fd, err
}

// CheckProbeRoot tells, before anything is written, whether root is a place the exporter
// keeps probe files in: not one that a user other than the exporter's or root could swap
// the probe directory in (UnsafeRootError, naming the fix). The daemon refuses such a
// target at start and reload, as --config.check does.
func CheckProbeRoot(root string) error {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Stat(root, &st) }); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // reported by the path's own checks
		}
		return &os.PathError{Op: "stat", Path: root, Err: err}
	}
	return rootSafe(root, &st)
}

// CheckProbeDir tells what the first round would refuse in root/.diskprobe: a symlink,
// not a directory, or another user's (ForeignFileError). --config.check reports it; the
// daemon starts and refuses it at every round, so that what someone plants there stops
// that target alone, and the target recovers once it is moved away.
func CheckProbeDir(root string) error {
	var st unix.Stat_t
	dir := filepath.Join(root, DirName)
	err := ignoringEINTR(func() error { return unix.Lstat(dir, &st) })
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil
	case err != nil:
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &ForeignFileError{Path: dir, Reason: "it is a symlink"}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return &ForeignFileError{Path: dir, Reason: "it is not a directory"}
	case int(st.Uid) != os.Geteuid():
		return &ForeignFileError{Path: dir, Reason: fmt.Sprintf("it is owned by uid %d, not by the exporter's uid %d", st.Uid, os.Geteuid())}
	}
	return nil
}

// idOfStatx is the fileID of what statx described: the same value as idOf for fstat.
func idOfStatx(st *unix.Statx_t) fileID {
	return fileID{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino}
}

// emptyPath is "" NUL-terminated, for statx(AT_EMPTY_PATH) on a descriptor.
var emptyPath = []byte{0}

// statxFD and statxPath are statx(2) of a descriptor and of a NUL-terminated path (not
// following a symlink) as raw calls through ignoringEINTR: unix.Statx and unix.Lstat copy
// their path to the heap, which every round of every probe would pay for (the fsync
// round allocates nothing, TestFsyncRoundDoesNotAllocate). Syscall6, not RawSyscall:
// on a hung filesystem the call blocks as any other, and gives its P back meanwhile.
func statxFD(fd int, st *unix.Statx_t) error {
	return statx(fd, emptyPath, unix.AT_EMPTY_PATH, st)
}

func statxPath(cpath []byte, st *unix.Statx_t) error {
	return statx(unix.AT_FDCWD, cpath, unix.AT_SYMLINK_NOFOLLOW, st)
}

func statx(dirFD int, cpath []byte, flags int, st *unix.Statx_t) error {
	return ignoringEINTR(func() error {
		_, _, errno := unix.Syscall6(unix.SYS_STATX, uintptr(dirFD), uintptr(unsafe.Pointer(&cpath[0])), uintptr(flags),
			uintptr(unix.STATX_TYPE|unix.STATX_INO|unix.STATX_NLINK), uintptr(unsafe.Pointer(st)), 0)
		if errno != 0 {
			return errno
		}
		return nil
	})
}

// ownFile is a probe kind's own file in its held probe directory: what the write probes
// (fsync, seqwrite) keep between rounds, and what a filler writes (the read probe file,
// the commit probe's). fd is -1 between files.
type ownFile struct {
	dir  *probeDir
	name string // in dir
	path string // for messages only: nothing is opened by it
	fd   int
}

// openOwnFile holds root's probe directory for the file name; the file itself is made or
// opened by the kind's first round.
func openOwnFile(root, name string) (ownFile, error) {
	dir, err := openProbeDir(root)
	if err != nil {
		return ownFile{}, err
	}
	return ownFile{dir: dir, name: name, path: dir.filePath(name), fd: -1}, nil
}

// check is a round's look before it writes: the probe directory is still the one held
// (probeDir.ensure), and the file still linked; a file that lost its name with its
// directory is let go, for a new one in the directory made afresh.
func (f *ownFile) check() error {
	if err := f.dir.ensure(); err != nil {
		f.drop()
		return err
	}
	if f.fd >= 0 && !stillLinked(f.fd) {
		f.drop()
	}
	return nil
}

// create replaces the file with a new one (probeDir.createProbeFile), open at fd.
func (f *ownFile) create(notice func(string), h Header) error {
	f.drop()
	fd, err := f.dir.createProbeFile(notice, f.name, h)
	if err != nil {
		return err
	}
	f.fd = fd
	return nil
}

// drop closes the file; it stays on disk for the next round or start.
func (f *ownFile) drop() {
	if f.fd >= 0 {
		_ = unix.Close(f.fd)
		f.fd = -1
	}
}

// close closes the file and lets the directory go.
func (f *ownFile) close() {
	f.drop()
	f.dir.close()
}

// remove closes the file and deletes it, then lets the directory go.
func (f *ownFile) remove() error {
	f.drop()
	err := f.dir.removeFile(f.name)
	f.dir.close()
	return err
}
