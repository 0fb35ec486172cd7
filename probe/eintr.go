package probe

import "golang.org/x/sys/unix"

// ignoringEINTR calls fn again for as long as it fails with EINTR, as Go's os package
// has done around its system calls since Go 1.15 (x/sys/unix does not). The runtime's
// preemption signal (SIGURG) can land on a thread as it enters a system call, and on a
// filesystem that honours interrupts, such as a FUSE daemon that answers the kernel's
// FUSE_INTERRUPT, the call then fails with EINTR instead of finishing: without the retry
// a preemption would be a probe error, and a page.
//
// Every interruptible call in this package goes through it (open, pread, pwrite,
// fdatasync, fallocate, ftruncate, fstat, lstat, rmdir, statfs, statx, faccessat, lseek,
// ioctl); close(2) never does: Linux releases the descriptor even when close fails with
// EINTR, and a retry could close one that another goroutine has just been given.
//
// In a timed region fn reads the clock that ends the region right after its system call,
// so that on the success path the region holds the system call alone, as it did before:
// once inlined (go build -gcflags=-m reports both this function and the func literals
// passed to it inlined), the loop's test sits after that clock read. A call that was
// retried is timed from its first attempt's start to its last attempt's end: the caller
// waited for all of it, as a caller of Go's (*os.File).Sync, which retries the same way,
// would have, and as etcd's wal_fsync timer around it would count.
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// openFD is open(2) through ignoringEINTR, always close-on-exec: the package opens
// files in many places, and each is an interruptible call.
func openFD(path string, flags int, perm uint32) (fd int, err error) {
	err = ignoringEINTR(func() error {
		fd, err = unix.Open(path, flags|unix.O_CLOEXEC, perm)
		return err
	})
	return fd, err
}

// seek is lseek(2) from offset 0 through ignoringEINTR: SEEK_HOLE and SEEK_END ask a
// FUSE or network filesystem's server.
func seek(fd, whence int) (off int64, err error) {
	err = ignoringEINTR(func() error {
		off, err = unix.Seek(fd, 0, whence)
		return err
	})
	return off, err
}
