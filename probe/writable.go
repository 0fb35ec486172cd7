package probe

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// CheckWritable tells, before anything is written, whether the exporter's user can keep
// its probe files in root/.diskprobe: create that directory, or write in the one there.
// It writes nothing: it asks statfs whether the mount of .diskprobe (or, before it is
// made, of root) is read-only and faccessat with
// AT_EACCESS whether the process's effective ids (those mkdir and open use) may write and
// search the directory. A test file would change the directory's mtime and, left by a
// crash, be something the exporter did not mean to leave. What the kernel's permission
// check does not see (a path-based LSM policy such as AppArmor's, a quota) shows as the
// first round's error instead.
func CheckWritable(root string) error {
	dir := filepath.Join(root, DirName)
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Lstat(dir, &st) })
	switch {
	case errors.Is(err, unix.ENOENT):
		dir = root // to be created
	case err != nil:
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		// A symlink or a file at .diskprobe, or (below) a .diskprobe of another user the
		// exporter could write: CheckProbeDir names them for --config.check, and the
		// daemon's rounds refuse them (openProbeDir) until the operator moves them away.
		return nil
	}
	// The mount of the directory the files go in: an existing .diskprobe may be a writable
	// mount of its own under a read-only root (the Helm chart mounts a target's path so).
	var fs unix.Statfs_t
	if err := ignoringEINTR(func() error { return unix.Statfs(dir, &fs) }); err != nil {
		return &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return &NotWritableError{Dir: dir, Err: unix.EROFS}
	}
	if err := ignoringEINTR(func() error { return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS) }); err != nil {
		return &NotWritableError{Dir: dir, Err: err}
	}
	return nil
}

// NotWritableError is a directory where the exporter's user cannot create its probe
// files: Err is EROFS for a read-only mount, else what faccessat said (EACCES).
type NotWritableError struct {
	Dir string
	Err error
}

func (e *NotWritableError) Unwrap() error { return e.Err }

func (e *NotWritableError) Error() string {
	if errors.Is(e.Err, unix.EROFS) {
		return fmt.Sprintf("%s is on a read-only filesystem, where the exporter cannot create its probe files: "+
			"remount it read-write, or, if it is read-write outside the service, the systemd unit's ProtectSystem=strict "+
			"makes it read-only for the exporter and the unit needs ReadWritePaths=%s (a drop-in: systemctl edit diskprobe_exporter)", e.Dir, e.Dir)
	}
	return fmt.Sprintf("%s is not writable by the exporter's user, %s: %v; it cannot create its probe files there: "+
		"give that user write access, or put the probe files in a directory of its own on the same filesystem (probe_dir)", e.Dir, whoAmI(), e.Err)
}

// whoAmI names the process's effective user, as a message to its operator should.
func whoAmI() string {
	uid := strconv.Itoa(os.Geteuid())
	if u, err := user.LookupId(uid); err == nil {
		return u.Username + " (uid " + uid + ")"
	}
	return "uid " + uid
}
