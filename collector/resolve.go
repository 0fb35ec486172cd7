package collector

import (
	"context"
	"errors"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/answer"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// resolution is what a target's path answered: the target with its kind and kind
// defaults, its device, the filesystem it is pinned to, or why it cannot be probed.
type resolution struct {
	target config.Target
	dev    device.Info
	devErr error // no device context (NFS, tmpfs, a container without the host's /sys)
	pin    filesystemPin
	err    error // a configuration error, naming file, line and field
	// planted is what is at the target's .diskprobe that its rounds will refuse (a
	// symlink, another user's directory): an error of --config.check, not of the daemon,
	// which starts and refuses it at every round, so that what someone plants there stops
	// that target alone. It names file, line and field.
	planted error
}

// resolveTarget makes every file system call a target needs before its first round
// (stat, statfs, the device behind it). On a hung mount they hang: it only ever runs
// through a Resolver.
func resolveTarget(file string, parsed config.Target, paths device.Paths) resolution {
	t := parsed
	if err := inspect.Target(file, &t); err != nil {
		return resolution{err: err}
	}
	res := resolution{target: t}
	res.dev, res.devErr = paths.Resolve(t.Path)
	if err := checkTarget(file, &t, res.dev, res.devErr); err != nil {
		return resolution{err: err}
	}
	res.pin = pinFilesystem(t)
	if t.Kind == config.KindDirectory {
		if err := probe.CheckProbeDir(t.ProbeRoot()); err != nil {
			res.planted = t.FieldError(file, probeRootField(&t), "%v", err)
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
	if t.Kind == config.KindDirectory {
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

// Resolver resolves targets against the disks with a bounded wait per path; a path that
// does not answer keeps at most one call outstanding (internal/answer).
type Resolver struct {
	paths device.Paths
	calls answer.Paths
}

// NewResolver resolves with the device context under paths.
func NewResolver(paths device.Paths) *Resolver { return &Resolver{paths: paths} }

// resolve resolves a target of file, waiting at most wait (no limit when 0) and until
// ctx ends; ok is false when the path did not answer.
func (r *Resolver) resolve(ctx context.Context, file string, parsed config.Target, wait time.Duration) (res resolution, ok bool) {
	var got resolution
	ok = r.calls.Call(ctx, parsed.Path+"\x00"+parsed.ProbeDir, wait, func() { got = resolveTarget(file, parsed, r.paths) })
	if !ok {
		return resolution{}, false
	}
	return got, true
}

// Resolve resolves every target of a parsed configuration, as --config.check does: a
// path that does not answer within wait is an error naming it. The targets are asked
// side by side, so that hung paths cost one wait, not one each.
func (r *Resolver) Resolve(cfg *config.Config, wait time.Duration) (*config.Config, error) {
	results := r.resolveAll(cfg, wait, func(int) bool { return true })
	out := &config.Config{File: cfg.File}
	var errs []error
	for i, res := range results {
		t := cfg.Targets[i]
		switch {
		case res == nil:
			errs = append(errs, t.FieldError(cfg.File, "path", "%v", &answer.NotAnsweredError{Path: t.Path, Wait: wait}))
		case res.err != nil:
			errs = append(errs, res.err)
		case res.planted != nil:
			errs = append(errs, res.planted)
		default:
			out.Targets = append(out.Targets, res.target)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// resolveAll resolves the targets for which want is true, side by side; a nil result
// is a path that did not answer within wait.
func (r *Resolver) resolveAll(cfg *config.Config, wait time.Duration, want func(i int) bool) []*resolution {
	results := make([]*resolution, len(cfg.Targets))
	done := make(chan struct{})
	n := 0
	for i, t := range cfg.Targets {
		if !want(i) {
			continue
		}
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			if res, ok := r.resolve(context.Background(), cfg.File, t, wait); ok {
				results[i] = &res
			}
		}()
	}
	for range n {
		<-done
	}
	return results
}

// Plan is a parsed configuration resolved against the disks as far as they answered,
// ready for Apply.
type Plan struct {
	file    string
	targets []planned
	wait    time.Duration
}

type planned struct {
	parsed config.Target
	res    *resolution // nil: the path did not answer; the target's worker resolves it
	keep   bool        // running already with this configuration: not asked again
}

// Unanswered are the warnings for the targets whose path did not answer in time.
func (p *Plan) Unanswered() []error {
	var out []error
	for _, pt := range p.targets {
		if !pt.keep && pt.res == nil {
			out = append(out, pt.parsed.FieldError(p.file, "path", "%v; probing it once it answers", &answer.NotAnsweredError{Path: pt.parsed.Path, Wait: p.wait}))
		}
	}
	return out
}

// Plan resolves a parsed configuration for Apply. Targets running unchanged are not
// asked again (a reload never touches a hung target it keeps); the others are asked side
// by side for at most wait. A path that does not answer is not an error: its target is
// started and resolves it on its I/O worker, where a hang shows as the in-flight age like
// any stuck operation. The error joins the configuration errors of the paths that did.
func (s *Scheduler) Plan(cfg *config.Config, wait time.Duration) (*Plan, error) {
	running := map[string]config.Target{}
	s.mu.Lock()
	for name, r := range s.runners {
		running[name] = r.parsed
	}
	s.mu.Unlock()
	p := &Plan{file: cfg.File, wait: wait}
	for _, t := range cfg.Targets {
		old, ok := running[t.Name]
		p.targets = append(p.targets, planned{parsed: t, keep: ok && sameTarget(old, t)})
	}
	results := s.resolver.resolveAll(cfg, wait, func(i int) bool { return !p.targets[i].keep })
	var errs []error
	for i, res := range results {
		p.targets[i].res = res
		if res != nil && res.err != nil {
			errs = append(errs, res.err)
		}
	}
	return p, errors.Join(errs...)
}
