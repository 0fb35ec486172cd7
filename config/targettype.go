package config

import (
	"errors"
	"fmt"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// AssumedDirectory is t as it is probed while its path has not answered yet: with the
// default probes of a directory when it names none. A path that hangs is on a network or
// FUSE filesystem, so a directory; block device nodes live on /dev, which answers.
func (t Target) AssumedDirectory() Target {
	t.applyTypeDefaults(TypeDirectory)
	return t
}

// SetType gives t the type its path turned out to be (inspect.Target asks the disk): the
// type's default probes when the file names none. It refuses, naming file, line and field,
// what the type cannot take: a probe directory or a write probe on a block device, where
// nothing is ever written.
func (t *Target) SetType(file string, typ TargetType) error {
	t.Type = typ
	t.applyTypeDefaults(typ)
	if typ != TypeBlockDevice {
		return nil
	}
	var errs []error
	if t.ProbeDir != "" {
		errs = append(errs, t.FieldError(file, "probe_dir", "%v", ProbeDirRefusedOn(typ, t.Path)))
	}
	for _, k := range probe.Kinds() {
		if k.Writes && t.Probe[k.Name] != nil {
			errs = append(errs, t.FieldError(file, k.Name, "%s is a block device: write probes are refused on block devices (the exporter never writes to a device); point %s at a directory on it instead", t.Path, k.Name))
		}
	}
	return errors.Join(errs...)
}

// ProbeDirRefusedOn is why a path of type typ takes no probe directory, or nil when it may.
func ProbeDirRefusedOn(typ TargetType, path string) error {
	if typ == TypeBlockDevice {
		return fmt.Errorf("%s is a block device: a probe directory is for directory targets (nothing is ever written for a block device)", path)
	}
	return nil
}
