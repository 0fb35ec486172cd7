package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/answer"
)

// Inspector inspects targets with a bounded wait per path; a path that does not answer
// keeps at most one call outstanding (internal/answer).
type Inspector struct {
	paths device.Paths
	calls answer.Paths
}

// NewInspector inspects with the device context under paths.
func NewInspector(paths device.Paths) *Inspector { return &Inspector{paths: paths} }

// Target inspects a target of file (Target), waiting at most wait (no limit when 0) and
// until ctx ends; ok is false when the path did not answer. A call on a path whose last call
// has not returned waits for that one before asking the path again.
func (in *Inspector) Target(ctx context.Context, file string, parsed config.Target, wait time.Duration) (res Result, ok bool) {
	var got Result
	ok = in.calls.Call(ctx, parsed.Path+"\x00"+parsed.ProbeDir, wait, func() { got = Target(file, parsed, in.paths) })
	if !ok {
		return Result{}, false
	}
	return got, true
}

// Config inspects every target of a parsed configuration, as --config.check does: a
// path that does not answer within wait is an error naming it. The targets are asked
// side by side, so that hung paths cost one wait, not one each.
func (in *Inspector) Config(cfg *config.Config, wait time.Duration) (*config.Config, error) {
	results := in.Targets(cfg, wait, func(int) bool { return true })
	out := &config.Config{File: cfg.File}
	var errs []error
	for i, res := range results {
		t := cfg.Targets[i]
		switch {
		case res == nil:
			errs = append(errs, t.FieldError(cfg.File, "path", "%v", &answer.NotAnsweredError{Path: t.Path, Wait: wait}))
		case res.Err != nil:
			errs = append(errs, res.Err)
		case res.Planted != nil:
			errs = append(errs, res.Planted)
		default:
			out.Targets = append(out.Targets, res.Target)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Targets inspects the targets of cfg for which want is true, side by side; a nil
// result is a path that did not answer within wait.
func (in *Inspector) Targets(cfg *config.Config, wait time.Duration, want func(i int) bool) []*Result {
	results := make([]*Result, len(cfg.Targets))
	done := make(chan struct{})
	n := 0
	for i, t := range cfg.Targets {
		if !want(i) {
			continue
		}
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			if res, ok := in.Target(context.Background(), cfg.File, t, wait); ok {
				results[i] = &res
			}
		}()
	}
	for range n {
		<-done
	}
	return results
}
