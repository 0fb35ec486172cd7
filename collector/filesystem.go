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
//
// A target with a probe_dir pins both: the measured path and the directory the probe files
// are in must stay on the filesystem they were on together.
type filesystemPin struct {
	paths []string
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
	pin := filesystemPin{paths: []string{t.Path}, dev: st.Dev, known: true}
	if t.ProbeDir != "" {
		pin.paths = append(pin.paths, t.ProbeDir)
	}
	return pin
}

// check fails when the target's path (or its probe_dir) is now on another filesystem. A
// path that is missing is left to the probes, which report it themselves.
func (p filesystemPin) check() error {
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
