package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Resolve looks at each target's path on disk: it must exist and be a directory or a
// block device. It then applies the default probes of that kind to targets that name
// none, and refuses write probes on block devices.
func (c *Config) Resolve() error {
	var errs []error
	for i := range c.Targets {
		t := &c.Targets[i]
		field := fmt.Sprintf("targets[%d].path", i)
		fail := func(format string, args ...any) {
			errs = append(errs, &Error{File: c.File, Line: t.Line, Field: field, Msg: fmt.Sprintf(format, args...)})
		}
		fi, err := os.Stat(t.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fail("%s does not exist", t.Path)
			continue
		case err != nil:
			fail("%v", err)
			continue
		case fi.IsDir():
			t.Kind = KindDirectory
		case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
			t.Kind = KindBlockDevice
		default:
			fail("%s is neither a directory nor a block device", t.Path)
			continue
		}
		t.applyKindDefaults()
		if t.ProbeDir != "" {
			dirField := fmt.Sprintf("targets[%d].probe_dir", i)
			var err error
			if t.Kind == KindBlockDevice {
				err = fmt.Errorf("%s is a block device: probe_dir is for directory targets (nothing is ever written for a block device)", t.Path)
			} else {
				err = CheckProbeDir(t.Path, t.ProbeDir)
			}
			if err != nil {
				errs = append(errs, &Error{File: c.File, Line: t.Line, Field: dirField, Msg: err.Error()})
			}
		}
		if t.Kind == KindBlockDevice {
			for _, w := range []struct {
				name string
				on   bool
			}{{ProbeFsync, t.Fsync != nil}, {ProbeSeqwrite, t.Seqwrite != nil}} {
				if w.on {
					errs = append(errs, &Error{File: c.File, Line: t.Line, Field: fmt.Sprintf("targets[%d].%s", i, w.name),
						Msg: fmt.Sprintf("%s is a block device: write probes are refused on block devices (the exporter never writes to a device); point %s at a directory on it instead", t.Path, w.name)})
				}
			}
		}
	}
	return errors.Join(errs...)
}

// CheckProbeDir says whether probeDir may hold the probe files that measure path's
// filesystem: an existing directory, not a symlink, outside path, on the same filesystem
// (the same device number: two bind mounts of one filesystem are one filesystem, which is
// how a container sees two host paths; a bind mount of another filesystem is not).
func CheckProbeDir(path, probeDir string) error {
	if probeDir == path || strings.HasPrefix(probeDir, path+string(filepath.Separator)) {
		return fmt.Errorf("%s is inside the measured path %s: probe_dir exists so that nothing is written there; put it beside it (e.g. %s)",
			probeDir, path, filepath.Join(filepath.Dir(path), "diskprobe-"+filepath.Base(path)))
	}
	var dirSt, pathSt unix.Stat_t
	if err := unix.Lstat(probeDir, &dirSt); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s does not exist: create it for the exporter (e.g. install -d -m 0700 %s)", probeDir, probeDir)
		}
		return &os.PathError{Op: "lstat", Path: probeDir, Err: err}
	}
	switch dirSt.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return fmt.Errorf("%s is a symlink: probe_dir must be a real directory, so that the probe files cannot be sent elsewhere", probeDir)
	default:
		return fmt.Errorf("%s is not a directory", probeDir)
	}
	if err := unix.Stat(path, &pathSt); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if dirSt.Dev != pathSt.Dev {
		return fmt.Errorf("%s is on another filesystem (device %d:%d) than %s (device %d:%d): probe files measure the filesystem they are on, so probe_dir must be on the measured path's",
			probeDir, unix.Major(dirSt.Dev), unix.Minor(dirSt.Dev), path, unix.Major(pathSt.Dev), unix.Minor(pathSt.Dev))
	}
	return nil
}

// applyKindDefaults turns on the default probes of the target's kind when the config
// names none: fsync, randread and seqread on directories; randread and seqread on devices.
func (t *Target) applyKindDefaults() {
	if t.Fsync != nil || t.Randread != nil || t.Seqread != nil || t.Seqwrite != nil {
		return
	}
	rr, sr := DefaultRandread, DefaultSeqread
	t.Randread, t.Seqread = &rr, &sr
	if t.Kind == KindDirectory {
		f := DefaultFsync
		t.Fsync = &f
	}
}
