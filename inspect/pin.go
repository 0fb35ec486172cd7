package inspect

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// Pin is the filesystem a directory target was on when its runner started. A
// mount that goes away under a running exporter (a pulled disk, a lazy unmount) leaves the
// target's path a plain directory on the parent filesystem, and the probe files open on
// the detached filesystem keep working: probing on would measure, and write probe files
// onto, a disk the target is not about. Rounds fail instead until the path is back on its
// filesystem.
//
// A target with a probe_dir pins both: the measured path and the directory the probe files
// are in must stay on the filesystem they were on together.
type Pin struct {
	paths []string
	dev   uint64
	known bool
}

// PinFilesystem pins a directory target to the filesystem its path is on now; a block
// device target, or a path that cannot be stat'ed, is pinned to nothing.
func PinFilesystem(t config.Target) Pin {
	if t.Type != config.TypeDirectory {
		return Pin{}
	}
	var st unix.Stat_t
	if err := unix.Stat(t.Path, &st); err != nil {
		return Pin{}
	}
	pin := Pin{paths: []string{t.Path}, dev: st.Dev, known: true}
	if t.ProbeDir != "" {
		pin.paths = append(pin.paths, t.ProbeDir)
	}
	return pin
}

// Check fails when the target's path (or its probe_dir) is now on another filesystem. A
// path that is missing is left to the probes, which report it themselves. Its stat hangs
// on a hung mount.
func (p Pin) Check() error {
	if !p.known {
		return nil
	}
	for _, path := range p.paths {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err == nil && st.Dev != p.dev {
			return &filesystemChangedError{path: path, was: p.dev, now: st.Dev}
		}
	}
	return nil
}

type filesystemChangedError struct {
	path     string
	was, now uint64
}

func (e *filesystemChangedError) Error() string {
	return fmt.Sprintf("%s is no longer on the filesystem it was on when probing started (device %d:%d, now %d:%d): "+
		"it was unmounted, or another filesystem was mounted there; not probing or writing what is there now "+
		"(restart the exporter to probe a new filesystem)",
		e.path, unix.Major(e.was), unix.Minor(e.was), unix.Major(e.now), unix.Minor(e.now))
}
