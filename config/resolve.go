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
