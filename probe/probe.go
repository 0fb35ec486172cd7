// Package probe does the disk I/O of diskprobe_exporter: it prepares probe files, issues
// the reads, writes and fdatasyncs, and times each system call. It knows nothing of
// Prometheus, so the one-shot `check` command and the benchmarks run exactly the code the
// daemon runs.
package probe

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Phase is which system call a Sample timed.
type Phase uint8

const (
	PhaseWrite     Phase = iota // write(2) of the fsync probe, before its fdatasync
	PhaseFdatasync              // fdatasync(2) of the fsync probe
	PhaseRead                   // one pread(2) of the randread probe
)

// Sample is one timed system call.
type Sample struct {
	Phase    Phase
	Duration time.Duration
}

// Result sums up one round.
type Result struct {
	Ops   int           // operations done (a write with its fdatasync is one)
	Bytes int64         // bytes read or written
	IO    time.Duration // time spent inside the timed system calls
}

// Budget is the target's rate limit: an operation waits here before it touches the disk.
type Budget interface {
	// Wait blocks until one operation moving n bytes may start, or ctx ends.
	Wait(ctx context.Context, bytes int) error
}

// Unlimited is the budget of the one-shot check and of benchmarks: operations run back to back.
var Unlimited Budget = unlimited{}

type unlimited struct{}

func (unlimited) Wait(ctx context.Context, _ int) error { return ctx.Err() }

// Inflight holds the start of the outstanding system call, so that the age of an
// operation stuck in the kernel can be reported while it is stuck.
type Inflight struct {
	start atomic.Int64 // UnixNano; 0 when idle
}

func (i *Inflight) begin(t time.Time) {
	if i != nil {
		i.start.Store(t.UnixNano())
	}
}

func (i *Inflight) end() {
	if i != nil {
		i.start.Store(0)
	}
}

// Age is how long the outstanding operation has been running at now; 0 when idle.
func (i *Inflight) Age(now time.Time) time.Duration {
	s := i.start.Load()
	if s == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, s))
}

// Env is what a round needs from the scheduler.
type Env struct {
	Budget   Budget
	Inflight *Inflight    // may be nil
	Observe  func(Sample) // called once per timed system call; may be nil
}

func (e *Env) observe(s Sample) {
	if e.Observe != nil {
		e.Observe(s)
	}
}

// Prober runs rounds of one probe kind on one target.
type Prober interface {
	// Round runs one round of operations. It returns ErrNotPrepared until the probe's
	// file is ready, and ErrLowFreeSpace when a write would eat into the free-space floor.
	Round(ctx context.Context, env *Env) (Result, error)
	// Close releases files and buffers; it removes nothing from disk.
	Close() error
}

// Preparer is a probe (or a file shared by probes) that needs one-time preparation,
// done in bounded steps so that other probes of the target keep their schedule.
type Preparer interface {
	// PrepareStep does a bounded share of the preparation and reports whether it is complete.
	PrepareStep(ctx context.Context, env *Env) (res Result, done bool, err error)
	// Progress is the share of the preparation done, 0 to 1.
	Progress() float64
}

var (
	// ErrNotPrepared means the probe file is still being prepared; the round is skipped.
	ErrNotPrepared = errors.New("probe file is still being prepared")
	// ErrLowFreeSpace means free space is under limits.min_free; write probes stop.
	ErrLowFreeSpace = errors.New("free space is under limits.min_free")
)
