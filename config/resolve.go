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
	fail := func(format string, args ...any) error { return t.FieldError(file, "path", format, args...) }
	fi, err := os.Stat(t.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fail("%s does not exist", t.Path)
	case err != nil:
		return fail("%v", err)
	case fi.IsDir():
		t.Kind = KindDirectory
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		t.Kind = KindBlockDevice
	default:
		return fail("%s is neither a directory nor a block device", t.Path)
	}
	t.applyKindDefaults(t.Kind)
	if t.ProbeDir != "" {
		var err error
		if t.Kind == KindBlockDevice {
			err = fmt.Errorf("%s is a block device: probe_dir is for directory targets (nothing is ever written for a block device)", t.Path)
		} else {
			err = CheckProbeDir(t.Path, t.ProbeDir)
		}
		if err != nil {
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

// AssumedDirectory is t as it is probed while its path has not answered yet: with the
// default probes of a directory when it names none. A path that hangs is on a network or
// FUSE filesystem, so a directory; block device nodes live on /dev, which answers.
func (t Target) AssumedDirectory() Target {
	t.applyKindDefaults(KindDirectory)
	return t
}
