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
	t.applyKindDefaults(KindDirectory)
	return t
}

// SetKind gives t the kind its path turned out to be (inspect.Target asks the disk): the
// kind's default probes when the file names none. It refuses, naming file, line and field,
// what the kind cannot take: a probe directory or a write probe on a block device, where
// nothing is ever written.
func (t *Target) SetKind(file string, kind Kind) error {
	t.Kind = kind
	t.applyKindDefaults(kind)
	if kind != KindBlockDevice {
		return nil
	}
	var errs []error
	if t.ProbeDir != "" {
		errs = append(errs, t.FieldError(file, "probe_dir", "%v", ProbeDirRefusedOn(kind, t.Path)))
	}
	for _, k := range probe.Kinds() {
		if k.Writes && t.Probe[k.Name] != nil {
			errs = append(errs, t.FieldError(file, k.Name, "%s is a block device: write probes are refused on block devices (the exporter never writes to a device); point %s at a directory on it instead", t.Path, k.Name))
		}
	}
	return errors.Join(errs...)
}

// ProbeDirRefusedOn is why a path of kind takes no probe directory, or nil when it may.
func ProbeDirRefusedOn(kind Kind, path string) error {
	if kind == KindBlockDevice {
		return fmt.Errorf("%s is a block device: a probe directory is for directory targets (nothing is ever written for a block device)", path)
	}
	return nil
}
