// Package inspect asks the disk about a configured path: what it is (a directory or a
// block device), whether a probe directory may measure it, the device behind it (through
// device.Paths.Resolve), whether its filesystem suits the probes the target runs, and,
// on every round, whether the target is still on the filesystem it was on (Pin). It is
// where a target's configuration meets the disk: config parses and validates without a
// system call, and collector calls only this package before a probe's first I/O. The
// probes' own files are probe's, which checks them relative to held descriptors. Every
// call here can hang on a hung mount (an NFS server gone, a stuck FUSE daemon): callers
// bound their wait for it (Inspector, check's answers).
package inspect

import (
	"errors"
	"fmt"
	"os"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// setType looks at t's path (and its probe_dir) on disk and gives t its type: the type's
// default probes when the file names none, and the type's refusals (config.Target.SetType).
// Errors name file, line and field.
func setType(file string, t *config.Target) error {
	typ, err := PathType(t.Path)
	if err != nil {
		return t.FieldError(file, "path", "%v", err)
	}
	errs := []error{t.SetType(file, typ)}
	if t.ProbeDir != "" && typ == config.TypeDirectory {
		if err := ProbeDir(typ, t.Path, t.ProbeDir); err != nil {
			errs = append(errs, t.FieldError(file, "probe_dir", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// PathType is what path is as a target: a directory or a block device; anything else (a
// regular file, a character device) or a path that does not exist is an error that says
// so. The daemon and the check command ask it alike. Its stat hangs on a hung
// mount: callers bound their wait for it.
func PathType(path string) (config.TargetType, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%s does not exist", path)
	case err != nil:
		return "", err
	case fi.IsDir():
		return config.TypeDirectory, nil
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return config.TypeBlockDevice, nil
	}
	return "", fmt.Errorf("%s is neither a directory nor a block device", path)
}
