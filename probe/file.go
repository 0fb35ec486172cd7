package probe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DirName is the directory inside a target path that holds every file the exporter writes.
const DirName = ".diskprobe"

// HeaderSize is the first block of every probe file: the header, then the probe's data.
// 4 KiB keeps the data O_DIRECT-aligned on every device.
const HeaderSize = 4096

const headerMagic = "diskprobe_exporter probe file v1\n"

// Header is what a probe file says about itself in its first block.
type Header struct {
	File     string // which file, its `kind=` line on disk: fsync, read, seqwrite, commit
	Size     int64
	Prepared bool // the whole file has been written and checked for holes
}

func (h Header) encode() []byte {
	b := make([]byte, HeaderSize)
	state := "preparing"
	if h.Prepared {
		state = "prepared"
	}
	copy(b, fmt.Sprintf("%skind=%s\nsize=%d\nstate=%s\n", headerMagic, h.File, h.Size, state))
	return b
}

func parseHeader(b []byte) (Header, bool) {
	if !bytes.HasPrefix(b, []byte(headerMagic)) {
		return Header{}, false
	}
	var h Header
	text := string(bytes.TrimRight(b[len(headerMagic):], "\x00"))
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "kind":
			h.File = v
		case "size":
			h.Size, _ = strconv.ParseInt(v, 10, 64)
		case "state":
			h.Prepared = v == "prepared"
		}
	}
	return h, true
}

// ForeignFileError is a file at one of our paths that the exporter did not create.
// It is never opened for writing, truncated or removed.
type ForeignFileError struct {
	Path   string
	Reason string
}

func (e *ForeignFileError) Error() string {
	return fmt.Sprintf("refusing to touch %s: %s; it was not created by diskprobe_exporter, move it away", e.Path, e.Reason)
}

// Closing a probe file's descriptor is never checked (`_ =`): each is closed after an
// fdatasync, after reads only, or on the way out of an error that is the one reported, so
// close(2) has nothing left to report that matters.

// openFile opens the probe file name of the directory for reading and writing, and checks
// it is ours on the descriptor before any I/O (checkOwnFile), its header read through
// that same descriptor. A zero-length file of ours is one whose creation was interrupted
// before the header was written. os.ErrNotExist when there is none.
func (d *probeDir) openFile(name string) (fd int, h Header, err error) {
	path := d.filePath(name)
	fd, err = openAt(d.fd, name, unix.O_RDWR)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return -1, Header{}, &ForeignFileError{Path: path, Reason: "it is a symlink"}
		}
		return -1, Header{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	size, err := checkOwnFile(fd, path)
	if err != nil {
		_ = unix.Close(fd)
		return -1, Header{}, err
	}
	if size == 0 {
		return fd, Header{}, nil
	}
	hb := make([]byte, HeaderSize)
	var n int
	if err := ignoringEINTR(func() (err error) { n, err = unix.Pread(fd, hb, 0); return err }); err != nil {
		_ = unix.Close(fd)
		return -1, Header{}, &os.PathError{Op: "read header", Path: path, Err: err}
	}
	h, ok := parseHeader(hb[:n])
	if !ok {
		_ = unix.Close(fd)
		return -1, Header{}, &ForeignFileError{Path: path, Reason: "it has no diskprobe_exporter header"}
	}
	return fd, h, nil
}

// checkOwnFile checks, on the open descriptor, that it is a file the exporter may write:
// a regular file (not a FIFO, a device node or a directory put at its name), owned by the
// exporter's user, with one link (not a hard link to someone's file). It returns the
// file's size and leaves the descriptor blocking (it was opened O_NONBLOCK so that a FIFO
// could not wedge the open).
func checkOwnFile(fd int, path string) (size int64, err error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, &ForeignFileError{Path: path, Reason: "it is not a regular file"}
	case int(st.Uid) != os.Geteuid():
		return 0, &ForeignFileError{Path: path, Reason: fmt.Sprintf("it is owned by uid %d", st.Uid)}
	case st.Nlink != 1:
		return 0, &ForeignFileError{Path: path, Reason: fmt.Sprintf("it has %d links: another name leads to it", st.Nlink)}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return 0, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return st.Size, nil
}

// removeFile deletes the probe file name after checking it is ours; a missing file is fine.
func (d *probeDir) removeFile(name string) error {
	if d.fd < 0 {
		return nil // never opened again after it was let go: nothing of this run to remove
	}
	fd, _, err := d.openFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	return d.unlinkChecked(name, fd)
}

// unlinkChecked removes name from the directory when it still names the file open at fd.
func (d *probeDir) unlinkChecked(name string, fd int) error {
	var held, now unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &held) }); err != nil {
		return &os.PathError{Op: "fstat", Path: d.filePath(name), Err: err}
	}
	if err := ignoringEINTR(func() error { return unix.Fstatat(d.fd, name, &now, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return &os.PathError{Op: "lstat", Path: d.filePath(name), Err: err}
	}
	if idOf(&now) != idOf(&held) {
		return &ForeignFileError{Path: d.filePath(name), Reason: "it was replaced while being removed"}
	}
	if err := ignoringEINTR(func() error { return unix.Unlinkat(d.fd, name, 0) }); err != nil {
		return &os.PathError{Op: "remove", Path: d.filePath(name), Err: err}
	}
	return nil
}

// createFile replaces the probe file name (which must be ours, if it exists) with a new
// one of h.Size bytes, preallocated with fallocate and carrying our header, opened for
// reading and writing. The header is written before anything else, so a crash never
// leaves a file we cannot recognise; a failed allocation (ENOSPC) removes the new file
// again.
//
// A filesystem without fallocate (FUSE ones such as bindfs, NFS before 4.2) gets a file
// extended to its size with ftruncate instead, as etcd does for its WAL segments there
// (fileutil.Preallocate) and as fio goes on after a warning: preallocated is then false,
// and the caller says so once (Env.Notice).
func (d *probeDir) createFile(name string, h Header) (fd int, preallocated bool, err error) {
	if err := d.removeFile(name); err != nil {
		return -1, false, err
	}
	path := d.filePath(name)
	fd, err = openAt(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL)
	if err != nil {
		return -1, false, &os.PathError{Op: "create", Path: path, Err: err}
	}
	fail := func(err error) (int, bool, error) {
		_ = d.unlinkChecked(name, fd)
		_ = unix.Close(fd)
		return -1, false, err
	}
	if _, err := checkOwnFile(fd, path); err != nil {
		return fail(err)
	}
	if err := writeHeader(fd, path, h); err != nil {
		return fail(err)
	}
	// fallocate, as etcd does for WAL segments and fio does by default: the data blocks
	// are reserved but unwritten, so every probe write pays the same extent conversion.
	preallocated = true
	err = ignoringEINTR(func() error { return unix.Fallocate(fd, 0, 0, h.Size) })
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		preallocated = false
		if err := ignoringEINTR(func() error { return unix.Ftruncate(fd, h.Size) }); err != nil {
			return fail(&os.PathError{Op: "ftruncate", Path: path, Err: err})
		}
	} else if err != nil {
		return fail(&os.PathError{Op: "fallocate", Path: path, Err: err})
	}
	if err := ignoringEINTR(func() error { return unix.Fdatasync(fd) }); err != nil {
		return fail(&os.PathError{Op: "fdatasync", Path: path, Err: err})
	}
	return fd, preallocated, nil
}

// createProbeFile is createFile for a probe: a filesystem that could not preallocate the
// file is told to the target's log through notice (noFallocateNotice).
func (d *probeDir) createProbeFile(notice func(string), name string, h Header) (int, error) {
	fd, preallocated, err := d.createFile(name, h)
	if err != nil {
		return -1, err
	}
	if !preallocated {
		notice(noFallocateNotice)
	}
	return fd, nil
}

// noFallocateNotice is what a probe says, once, on a filesystem without fallocate. It
// names no file: the target's files (or check's scratch directories) share the filesystem.
const noFallocateNotice = "fallocate is not supported on the target's filesystem" +
	": probe files are extended with ftruncate instead, as etcd does for its WAL there, so each first write into a block also allocates it"

// writeHeader writes the header of the probe file open at fd and makes it durable,
// through that descriptor: from a page-aligned buffer, so that it works whether the
// descriptor is O_DIRECT or not.
func writeHeader(fd int, path string, h Header) error {
	buf, err := alignedBuffer(HeaderSize)
	if err != nil {
		return err
	}
	defer freeBuffer(buf)
	copy(buf, h.encode())
	var n int
	if err := ignoringEINTR(func() (err error) { n, err = unix.Pwrite(fd, buf, 0); return err }); err != nil {
		return &os.PathError{Op: "write header", Path: path, Err: err}
	}
	if n != HeaderSize {
		return &os.PathError{Op: "write header", Path: path, Err: fmt.Errorf("short write: %d of %d bytes", n, HeaderSize)}
	}
	if err := ignoringEINTR(func() error { return unix.Fdatasync(fd) }); err != nil {
		return &os.PathError{Op: "fdatasync", Path: path, Err: err}
	}
	return nil
}

// FreeBytes is the space available to the exporter's user on the filesystem holding dir.
func FreeBytes(dir string) (int64, error) {
	var s unix.Statfs_t
	if err := ignoringEINTR(func() error { return unix.Statfs(dir, &s) }); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(s.Bavail) * int64(s.Bsize), nil
}

// checkFreeFloor returns ErrLowFreeSpace when the filesystem holding dir has less than
// floor bytes free once need more are allocated (a new file's size); floor 0 disables
// the check. Its statfs hangs on a hung mount (an NFS server gone, a stuck FUSE daemon)
// as a write does: a round makes it untimed (round.untimed).
func checkFreeFloor(dir string, floor, need int64) error {
	free, under, err := underFreeFloor(dir, floor, need)
	if err != nil || !under {
		return err
	}
	return fmt.Errorf("%w: %d MiB free on %s, floor %d MiB", ErrLowFreeSpace, free>>20, dir, floor>>20)
}

// underFreeFloor says whether allocating need bytes on the filesystem holding dir would
// leave less than floor free; floor 0 disables it. For a caller with a message of its own.
func underFreeFloor(dir string, floor, need int64) (free int64, under bool, err error) {
	if floor <= 0 {
		return 0, false, nil
	}
	free, err = FreeBytes(dir)
	if err != nil {
		return 0, false, err
	}
	return free, free < floor+need, nil
}

// stillLinked reports whether the file open at fd still has a name: a target directory
// deleted (and perhaps recreated) under a running exporter leaves the descriptor on a
// deleted file, where writes would succeed and measure nothing real. fstat's link count
// tells without a path lookup, so the per-round check does not allocate. On FUSE and NFS
// fstat asks the server: a round makes it untimed (round.untimed).
func stillLinked(fd int) bool {
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) })
	return err == nil && st.Nlink > 0
}

// OwnFiles is what the exporter made in a directory it wrote probe files into (a target's
// path or probe_dir): the probe directory and the probe files in it. Nothing else is ever
// counted as ours.
type OwnFiles struct {
	Dir     string   // <dir>/.diskprobe, a real directory; "" when there is none
	Files   []string // regular files carrying our header, or empty *.probe files (created, interrupted before the header)
	Foreign []string // anything else in Dir, which is left there, and keeps Dir

	dirID  fileID            // Dir as found: Remove works in that directory or not at all
	fileID map[string]fileID // each of Files as found, by name in Dir
}

// fileID is a file's device and inode: what stays the same while its names change.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{dev: st.Dev, ino: st.Ino} }

// FindOwnFiles looks for the exporter's files in dir/.diskprobe, whoever runs it (a
// package's maintainer script runs as root; the files belong to the service's user): a
// file is ours by its header, not by its owner. Like the probes, it works relative to the
// directory's descriptor, opened without following a symlink, and looks at each file
// through a descriptor of its own: a name swapped meanwhile leads nowhere else. A dir
// that group or others can write without the sticky bit is refused, as the daemon
// refuses to write there (UnsafeRootError): what is in it may be anyone's.
func FindOwnFiles(dir string) (OwnFiles, error) {
	probeDir := filepath.Join(dir, DirName)
	var rootSt unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Stat(dir, &rootSt) }); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return OwnFiles{}, nil
		}
		return OwnFiles{}, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if rootSt.Mode&unix.S_IFMT != unix.S_IFDIR {
		return OwnFiles{}, nil // a block device's path has no .diskprobe
	}
	dfd, err := openFD(probeDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return OwnFiles{}, nil // a symlink or a file at our name is not ours
		}
		return OwnFiles{}, &os.PathError{Op: "open", Path: probeDir, Err: err}
	}
	defer func() { _ = unix.Close(dfd) }()
	if othersCanSwap(rootSt.Mode) {
		return OwnFiles{}, &UnsafeRootError{Root: dir, Reason: fmt.Sprintf("group or others can write it (mode %04o) without the sticky bit: what is in %s may be anyone's", rootSt.Mode&0o7777, probeDir),
			Fix: "remove what is yours by hand"}
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(dfd, &st) }); err != nil {
		return OwnFiles{}, &os.PathError{Op: "fstat", Path: probeDir, Err: err}
	}
	names, err := readDirNames(dfd, probeDir)
	if err != nil {
		return OwnFiles{}, err
	}
	p := OwnFiles{Dir: probeDir, dirID: idOf(&st), fileID: map[string]fileID{}}
	for _, name := range names {
		path := filepath.Join(probeDir, name)
		if id, ok := ownFileAt(dfd, name); ok {
			p.Files = append(p.Files, path)
			p.fileID[name] = id
		} else {
			p.Foreign = append(p.Foreign, path)
		}
	}
	return p, nil
}

// readDirNames lists the directory open at fd, through a descriptor of its own.
func readDirNames(fd int, path string) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(dup), path)
	defer func() { _ = f.Close() }()
	return f.Readdirnames(-1)
}

// ownFileAt reports whether name in the directory open at dirFD is a regular file (not a
// symlink) that the exporter created: it carries the header, or it is an empty *.probe
// file. It looks through a descriptor, and returns that file's identity.
func ownFileAt(dirFD int, name string) (fileID, bool) {
	fd, err := openAt(dirFD, name, unix.O_RDONLY)
	if err != nil {
		return fileID{}, false
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileID{}, false
	}
	if st.Size == 0 {
		return idOf(&st), strings.HasSuffix(name, ".probe")
	}
	b := make([]byte, len(headerMagic))
	var n int
	if err := ignoringEINTR(func() (err error) { n, err = unix.Pread(fd, b, 0); return err }); err != nil {
		return fileID{}, false
	}
	return idOf(&st), n == len(b) && string(b) == headerMagic
}

// Remove deletes the files, each checked again just before (still ours, still the file
// found), then the directory when nothing else is in it (rmdir: whatever appeared
// meanwhile keeps it), all relative to the directory found, reopened and compared. It
// returns what it removed.
func (p OwnFiles) Remove() (removed []string, err error) {
	if p.Dir == "" {
		return nil, nil
	}
	dfd, err := openFD(p.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p.Dir, Err: err}
	}
	defer func() { _ = unix.Close(dfd) }()
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(dfd, &st) }); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p.Dir, Err: err}
	}
	if idOf(&st) != p.dirID {
		return nil, &ReplacedDirError{Path: p.Dir}
	}
	for _, f := range p.Files {
		name := filepath.Base(f)
		if id, ok := ownFileAt(dfd, name); !ok || id != p.fileID[name] {
			continue
		}
		if err := ignoringEINTR(func() error { return unix.Unlinkat(dfd, name, 0) }); err != nil && !errors.Is(err, unix.ENOENT) {
			return removed, &os.PathError{Op: "remove", Path: f, Err: err}
		}
		removed = append(removed, f)
	}
	if len(p.Foreign) > 0 {
		return removed, nil
	}
	parent := filepath.Dir(p.Dir)
	pfd, err := openFD(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK, 0)
	if err != nil {
		return removed, &os.PathError{Op: "open", Path: parent, Err: err}
	}
	defer func() { _ = unix.Close(pfd) }()
	if err := ignoringEINTR(func() error { return unix.Fstatat(pfd, DirName, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil || idOf(&st) != p.dirID {
		return removed, nil // gone or replaced meanwhile: not ours to remove
	}
	if err := ignoringEINTR(func() error { return unix.Unlinkat(pfd, DirName, unix.AT_REMOVEDIR) }); err == nil {
		removed = append(removed, p.Dir)
	} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
		return removed, &os.PathError{Op: "rmdir", Path: p.Dir, Err: err}
	}
	return removed, nil
}
