package probe

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckOnDisk tells, before any file is written, whether dir is on a disk at all: a
// memory filesystem (tmpfs, ramfs) is refused for what each probe would report there.
// fdatasync on memory returns at once, so a probe that syncs (fsync, seqwrite) would
// report a healthy disk that does not exist; O_DIRECT reads bypass no page cache there,
// the pages are the data.
func CheckOnDisk(dir string, syncs, directReads bool) error {
	var s unix.Statfs_t
	if err := ignoringEINTR(func() error { return unix.Statfs(dir, &s) }); err != nil {
		return &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	name, ok := memoryFilesystems[int64(s.Type)]
	if !ok {
		return nil
	}
	var why []string
	if syncs {
		why = append(why, "fdatasync on memory returns at once, so a write probe (fsync, seqwrite) would report a healthy disk that does not exist")
	}
	if directReads {
		why = append(why, "O_DIRECT read probes cannot measure it")
	}
	return fmt.Errorf("%s is on %s, which is memory, not a disk: %s", dir, name, strings.Join(why, "; and "))
}
