package config

import (
	"errors"
	"fmt"
	"os"
)

// Resolve looks at each target's path on disk: it must exist and be a directory or a
// block device. It then applies the default probes of that kind to targets that name
// none, and refuses write probes on block devices.
func (c *Config) Resolve() error {
	var errs []error
	for i := range c.Targets {
		if err := ResolveTarget(c.File, &c.Targets[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Read reads and parses a configuration file without looking at the disks: the daemon
// resolves each target's path itself, with a bounded wait, because a path on a hung
// mount never answers.
func Read(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(data, file)
}

// ResolveTarget is Resolve for one target of file. Its stat calls hang on a hung mount
// (an NFS server gone, a stuck FUSE daemon): callers that must not hang run it in a
// goroutine of its own, on a copy of the target.
func ResolveTarget(file string, t *Target) error {
	var errs []error
	kind, err := KindOf(t.Path)
	if err != nil {
		return t.FieldError(file, "path", "%v", err)
	}
	t.Kind = kind
	t.applyKindDefaults(t.Kind)
	if t.ProbeDir != "" {
		if err := CheckProbeDir(t.Kind, t.Path, t.ProbeDir); err != nil {
			errs = append(errs, t.FieldError(file, "probe_dir", "%v", err))
		}
	}
	for _, k := range ProbeKinds {
		if t.Kind == KindBlockDevice && k.Writes && t.Probe[k.Name] != nil {
			errs = append(errs, t.FieldError(file, k.Name, "%s is a block device: write probes are refused on block devices (the exporter never writes to a device); point %s at a directory on it instead", t.Path, k.Name))
		}
	}
	return errors.Join(errs...)
}

// KindOf is what path is as a target: a directory or a block device; anything else (a
// regular file, a character device) or a path that does not exist is an error that says
// so. The daemon's Resolve and the check command ask it alike. Its stat hangs on a hung
// mount: callers bound their wait for it.
func KindOf(path string) (Kind, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%s does not exist", path)
	case err != nil:
		return "", err
	case fi.IsDir():
		return KindDirectory, nil
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return KindBlockDevice, nil
	}
	return "", fmt.Errorf("%s is neither a directory nor a block device", path)
}

// AssumedDirectory is t as it is probed while its path has not answered yet: with the
// default probes of a directory when it names none. A path that hangs is on a network or
// FUSE filesystem, so a directory; block device nodes live on /dev, which answers.
func (t Target) AssumedDirectory() Target {
	t.applyKindDefaults(KindDirectory)
	return t
}
