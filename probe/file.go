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
	Kind     string // fsync, read, seqwrite, commit
	Size     int64
	Prepared bool // the whole file has been written and checked for holes
}

func (h Header) encode() []byte {
	b := make([]byte, HeaderSize)
	state := "preparing"
	if h.Prepared {
		state = "prepared"
	}
	copy(b, fmt.Sprintf("%skind=%s\nsize=%d\nstate=%s\n", headerMagic, h.Kind, h.Size, state))
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
			h.Kind = v
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

// ensureDir creates <path>/.diskprobe (mode 0700) or checks that the existing one is ours:
// a real directory, not a symlink, owned by the exporter's user.
func ensureDir(target string) (string, error) {
	dir := filepath.Join(target, DirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("creating probe directory: %w", err)
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(dir, &st) }); err != nil {
		return "", fmt.Errorf("checking probe directory: %w", &os.PathError{Op: "lstat", Path: dir, Err: err})
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return "", &ForeignFileError{Path: dir, Reason: "it is a symlink"}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", &ForeignFileError{Path: dir, Reason: "it is not a directory"}
	case int(st.Uid) != os.Geteuid():
		return "", &ForeignFileError{Path: dir, Reason: fmt.Sprintf("it is owned by uid %d, not by the exporter's uid %d", st.Uid, os.Geteuid())}
	}
	if st.Mode&0o777 != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", fmt.Errorf("restricting probe directory: %w", err)
		}
	}
	return dir, nil
}

// Closing a probe file's descriptor is never checked (`_ =`): each is closed after an
// fdatasync, after reads only, or on the way out of an error that is the one reported, so
// close(2) has nothing left to report that matters.

// openOwn opens an existing probe file without following symlinks and checks that it is
// ours: a regular file owned by us, with our header. A zero-length file of ours is taken as
// one whose creation was interrupted before the header was written.
func openOwn(path string, flags int) (*os.File, Header, error) {
	fd, err := openFD(path, flags|unix.O_NOFOLLOW, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, Header{}, &ForeignFileError{Path: path, Reason: "it is a symlink"}
		}
		return nil, Header{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		_ = f.Close()
		return nil, Header{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = f.Close()
		return nil, Header{}, &ForeignFileError{Path: path, Reason: "it is not a regular file"}
	}
	if int(st.Uid) != os.Geteuid() {
		_ = f.Close()
		return nil, Header{}, &ForeignFileError{Path: path, Reason: fmt.Sprintf("it is owned by uid %d", st.Uid)}
	}
	if st.Size == 0 {
		return f, Header{}, nil
	}
	// Read the header through a buffered descriptor: f may be O_DIRECT.
	hb := make([]byte, HeaderSize)
	n, err := readHeaderBytes(path, hb)
	if err != nil {
		_ = f.Close()
		return nil, Header{}, err
	}
	h, ok := parseHeader(hb[:n])
	if !ok {
		_ = f.Close()
		return nil, Header{}, &ForeignFileError{Path: path, Reason: "it has no diskprobe_exporter header"}
	}
	return f, h, nil
}

func readHeaderBytes(path string, b []byte) (n int, err error) {
	fd, err := openFD(path, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	if err := ignoringEINTR(func() (err error) { n, err = unix.Pread(fd, b, 0); return err }); err != nil {
		return 0, &os.PathError{Op: "read header", Path: path, Err: err}
	}
	return n, nil
}

// removeOwn deletes a probe file after checking it is ours. A missing file is fine.
func removeOwn(path string) error {
	f, _, err := openOwn(path, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_ = f.Close()
	return os.Remove(path)
}

// createOwn replaces the probe file at path (which must be ours, if it exists) with a
// new one of the given size, preallocated with fallocate and carrying our header. The
// header is written before anything else, so a crash never leaves a file we cannot
// recognise; a failed allocation (ENOSPC) removes the new file again.
//
// A filesystem without fallocate (FUSE ones such as bindfs, NFS before 4.2) gets a file
// extended to its size with ftruncate instead, as etcd does for its WAL segments there
// (fileutil.Preallocate) and as fio goes on after a warning: preallocated is then false,
// and the caller says so once (Env.Notice).
func createOwn(path string, h Header) (f *os.File, preallocated bool, err error) {
	if err := removeOwn(path); err != nil {
		return nil, false, err
	}
	fd, err := openFD(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, &os.PathError{Op: "create", Path: path, Err: err}
	}
	f = os.NewFile(uintptr(fd), path)
	fail := func(op string, err error) (*os.File, bool, error) {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, false, &os.PathError{Op: op, Path: path, Err: err}
	}
	if err := ignoringEINTR(func() error { _, err := unix.Pwrite(fd, h.encode(), 0); return err }); err != nil {
		return fail("write header", err)
	}
	// fallocate, as etcd does for WAL segments and fio does by default: the data blocks
	// are reserved but unwritten, so every probe write pays the same extent conversion.
	preallocated = true
	err = ignoringEINTR(func() error { return unix.Fallocate(fd, 0, 0, h.Size) })
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		preallocated = false
		if err := ignoringEINTR(func() error { return unix.Ftruncate(fd, h.Size) }); err != nil {
			return fail("ftruncate", err)
		}
	} else if err != nil {
		return fail("fallocate", err)
	}
	if err := ignoringEINTR(func() error { return unix.Fdatasync(fd) }); err != nil {
		return fail("fdatasync", err)
	}
	return f, preallocated, nil
}

// createProbeFile is createOwn for a probe: a filesystem that could not preallocate the
// file is told to the target's log through notice (noFallocateNotice).
func createProbeFile(notice func(string), path string, h Header) (*os.File, error) {
	f, preallocated, err := createOwn(path, h)
	if err != nil {
		return nil, err
	}
	if !preallocated {
		notice(noFallocateNotice)
	}
	return f, nil
}

// createDirectFile is createProbeFile for the probes that write with O_DIRECT (seqwrite,
// and the preparation of the read file): it returns the new file reopened for O_DIRECT
// writes.
func createDirectFile(notice func(string), path string, h Header) (fd int, err error) {
	f, err := createProbeFile(notice, path, h)
	if err != nil {
		return -1, err
	}
	_ = f.Close()
	return openDirect(path, unix.O_WRONLY)
}

// noFallocateNotice is what a probe says, once, on a filesystem without fallocate. It
// names no file: the target's files (or check's scratch directories) share the filesystem.
const noFallocateNotice = "fallocate is not supported on the target's filesystem" +
	": probe files are extended with ftruncate instead, as etcd does for its WAL there, so each first write into a block also allocates it"

// writeHeader rewrites the header of an open probe file and makes it durable.
func writeHeader(f *os.File, h Header) error {
	fd, err := openFD(f.Name(), unix.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: f.Name(), Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	if err := ignoringEINTR(func() error { _, err := unix.Pwrite(fd, h.encode(), 0); return err }); err != nil {
		return &os.PathError{Op: "write header", Path: f.Name(), Err: err}
	}
	return ignoringEINTR(func() error { return unix.Fdatasync(fd) })
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
}

// FindOwnFiles looks for the exporter's files in dir/.diskprobe, whoever runs it (a
// package's maintainer script runs as root; the files belong to the service's user): a
// file is ours by its header, not by its owner.
func FindOwnFiles(dir string) (OwnFiles, error) {
	probeDir := filepath.Join(dir, DirName)
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(probeDir, &st) }); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return OwnFiles{}, nil
		}
		return OwnFiles{}, &os.PathError{Op: "lstat", Path: probeDir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return OwnFiles{}, nil // a symlink or a file at our name is not ours
	}
	entries, err := os.ReadDir(probeDir)
	if err != nil {
		return OwnFiles{}, err
	}
	p := OwnFiles{Dir: probeDir}
	for _, e := range entries {
		path := filepath.Join(probeDir, e.Name())
		if isOwnFile(path) {
			p.Files = append(p.Files, path)
		} else {
			p.Foreign = append(p.Foreign, path)
		}
	}
	return p, nil
}

// isOwnFile reports whether path is a regular file (not a symlink) that the exporter
// created: it carries the header, or it is an empty *.probe file.
func isOwnFile(path string) bool {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(path, &st) }); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	if st.Size == 0 {
		return strings.HasSuffix(path, ".probe")
	}
	b := make([]byte, len(headerMagic))
	n, err := readHeaderBytes(path, b)
	return err == nil && n == len(b) && string(b) == headerMagic
}

// Remove deletes the files, each checked again just before, then the directory when
// nothing else is in it (rmdir: whatever appeared meanwhile keeps it). It returns what it
// removed.
func (p OwnFiles) Remove() (removed []string, err error) {
	for _, f := range p.Files {
		if !isOwnFile(f) {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, f)
	}
	if p.Dir != "" && len(p.Foreign) == 0 {
		if err := ignoringEINTR(func() error { return unix.Rmdir(p.Dir) }); err == nil {
			removed = append(removed, p.Dir)
		} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
			return removed, &os.PathError{Op: "rmdir", Path: p.Dir, Err: err}
		}
	}
	return removed, nil
}
