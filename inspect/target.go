package inspect

import (
	"errors"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Result is what a target's path answered: the target with its type and the type's
// default probes, its device, the filesystem it is pinned to, or why it cannot be probed.
type Result struct {
	Target    config.Target
	Device    device.Info
	DeviceErr error // no device context (NFS, tmpfs, a container without the host's /sys)
	Pin       Pin
	Err       error // a configuration error, naming file, line and field
	// Planted is what is at the target's .diskprobe that its rounds will refuse (a
	// symlink, another user's directory): an error of --config.check, not of the daemon,
	// which starts and refuses it at every round, so that what someone plants there stops
	// that target alone. It names file, line and field.
	Planted error
}

// Target makes every file system call a target of file needs before its first round
// (stat, statfs, the device behind it, its probe directory). On a hung mount they hang:
// the daemon only ever calls it through an Inspector.
func Target(file string, parsed config.Target, paths device.Paths) Result {
	t := parsed
	if err := setType(file, &t); err != nil {
		return Result{Err: err}
	}
	res := Result{Target: t}
	res.Device, res.DeviceErr = paths.Resolve(t.Path)
	if err := checkTarget(file, &t, res.Device, res.DeviceErr); err != nil {
		return Result{Err: err}
	}
	res.Pin = PinFilesystem(t)
	if t.Type == config.TypeDirectory {
		if err := probe.CheckProbeDir(t.ProbeRoot()); err != nil {
			res.Planted = t.FieldError(file, probeRootField(&t), "%v", err)
		}
	}
	return res
}

// checkTarget validates what a target needs from its disk: a filesystem that is not
// memory (where fdatasync returns at once and O_DIRECT reads read RAM), a probe directory
// the exporter's user can write, and block sizes that suit the device's O_DIRECT
// alignment. Errors name the file, line and field.
func checkTarget(file string, t *config.Target, dev device.Info, devErr error) error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, t.FieldError(file, field, format, args...))
	}
	var direct []*probe.Kind     // the enabled probes that open with O_DIRECT
	syncs, reads := false, false // what a memory filesystem would make meaningless
	for _, k := range config.ProbeKinds() {
		if t.Probe[k.Name] == nil {
			continue
		}
		if k.DirectIO {
			direct = append(direct, k)
		}
		syncs = syncs || k.Writes
		reads = reads || k.ReadsSource
	}
	if t.Type == config.TypeDirectory {
		if err := probe.CheckOnDisk(t.Path, syncs, reads); err != nil {
			fail("path", "%v", err)
			return errors.Join(errs...)
		}
		// Every directory target writes its probe files, read probes too (their file is
		// prepared on disk): a probe directory the exporter cannot write fails every round.
		field := probeRootField(t)
		if err := probe.CheckWritable(t.ProbeRoot()); err != nil {
			fail(field, "%w", err) // EROFS, EACCES: /-/ready tells them from passing errors
		}
		if err := probe.CheckProbeRoot(t.ProbeRoot()); err != nil {
			fail(field, "%w", err)
		}
	}
	if devErr != nil || dev.LogicalBlockSize <= 0 {
		return nil // device context is a bonus; the probes run without it
	}
	align := dev.LogicalBlockSize
	for _, k := range direct {
		if bs := t.Probe[k.Name].BlockSize; bs%align != 0 {
			fail(k.Name+".block_size", "%d is not a multiple of %s's logical block size %d, which O_DIRECT needs", bs, dev.Name, align)
		}
	}
	return errors.Join(errs...)
}

// probeRootField is the field that names where the target's probe files go.
func probeRootField(t *config.Target) string {
	if t.ProbeDir != "" {
		return "probe_dir"
	}
	return "path"
}
