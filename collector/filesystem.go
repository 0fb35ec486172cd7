package collector

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// filesystemPin is the filesystem a directory target was on when its runner started. A
// mount that goes away under a running exporter (a pulled disk, a lazy unmount) leaves the
// target's path a plain directory on the parent filesystem, and the probe files open on
// the detached filesystem keep working: probing on would measure, and write probe files
// onto, a disk the target is not about. Rounds fail instead until the path is back on its
// filesystem.
type filesystemPin struct {
	path  string
	dev   uint64
	known bool
}

func pinFilesystem(t config.Target) filesystemPin {
	if t.Kind != config.KindDirectory {
		return filesystemPin{}
	}
	var st unix.Stat_t
	if err := unix.Stat(t.Path, &st); err != nil {
		return filesystemPin{}
	}
	return filesystemPin{path: t.Path, dev: st.Dev, known: true}
}

// check fails when the target's path is now on another filesystem. A path that is
// missing is left to the probes, which report it themselves.
func (p filesystemPin) check() error {
	if !p.known {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(p.path, &st); err != nil || st.Dev == p.dev {
		return nil
	}
	return &filesystemChangedError{path: p.path, was: p.dev, now: st.Dev}
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
