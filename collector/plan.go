package collector

import (
	"errors"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/answer"
)

// Plan is a parsed configuration inspected on the disks as far as they answered,
// ready for Apply.
type Plan struct {
	file    string
	targets []planned
	wait    time.Duration
}

type planned struct {
	parsed config.Target
	res    *inspect.Result // nil: the path did not answer; the target's worker inspects it
	keep   bool            // running already with this configuration: not asked again
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

// Plan inspects the targets of a parsed configuration for Apply. Targets running unchanged are not
// asked again (a reload never touches a hung target it keeps); the others are asked side
// by side for at most wait. A path that does not answer is not an error: its target is
// started and its I/O worker inspects it, where a hang shows as the in-flight age like
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
	results := s.inspector.Targets(cfg, wait, func(i int) bool { return !p.targets[i].keep })
	var errs []error
	for i, res := range results {
		p.targets[i].res = res
		if res != nil && res.Err != nil {
			errs = append(errs, res.Err)
		}
	}
	return p, errors.Join(errs...)
}
