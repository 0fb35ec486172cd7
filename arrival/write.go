package arrival

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// WriteFile is the file the writer pod writes in its volume, then removes.
const WriteFile = ".diskprobe-arrival"

// WriteSize is what the writer writes: one page, as the smallest write a workload makes.
const WriteSize = 4096

// Write is the writer pod's work (`arrival-write DIR`): 4 KiB to a new file in dir,
// fdatasync, then the file removed. It answers how long the fdatasync took. The file is
// created with O_EXCL, never opened through what was there: a file of that name left by
// an earlier writer (a volume reused) is removed first, a symlink included.
func Write(dir string) (time.Duration, error) {
	path := filepath.Join(dir, WriteFile)
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := os.Remove(path); err != nil {
			return 0, err
		}
		fd, err = unix.Open(path, flags, 0o600)
	}
	if err != nil {
		return 0, &os.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	removed := false
	defer func() {
		_ = f.Close()
		if !removed {
			_ = os.Remove(path)
		}
	}()
	buf := make([]byte, WriteSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	if _, err := f.Write(buf); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := unix.Fdatasync(fd); err != nil {
		return 0, &os.PathError{Op: "fdatasync", Path: path, Err: err}
	}
	took := time.Since(start)
	if err := f.Close(); err != nil {
		return 0, err
	}
	removed = true
	if err := os.Remove(path); err != nil {
		return 0, err
	}
	return took, nil
}

// WriteLine is what the writer prints on success.
func WriteLine(dir string, fdatasync time.Duration) string {
	return fmt.Sprintf("wrote %d bytes to %s, fdatasync %s, removed it", WriteSize, filepath.Join(dir, WriteFile), fdatasync.Round(time.Microsecond))
}
