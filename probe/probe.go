// Package probe does the disk I/O of diskprobe_exporter: it prepares probe files, issues
// the reads, writes and fdatasyncs, and times each system call. It knows nothing of
// Prometheus, so the one-shot `check` command and the benchmarks run the daemon's probers
// (check's etcd profile runs Fsync as the daemon does; its sweep and randrw profiles run
// RunQueue, queue-depth I/O the daemon never issues).
package probe

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Phase is which system call, or run of calls, a Sample timed.
type Phase uint8

// The timed system calls. A phase's histogram is its kind's (Kind.Histograms), so a
// value need only differ from the other phases of the same kind: a new kind may declare
// its own in its file.
const (
	PhaseWrite     Phase = iota // write(2) of the fsync probe, before its fdatasync
	PhaseFdatasync              // fdatasync(2) of the fsync probe
	PhaseRead                   // one pread(2) of the randread probe
	PhaseCommit                 // one whole commit of the commit probe: its page writes, fdatasync, meta page write, fdatasync
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
	// CPUWait is how long the OS thread that made the timed calls spent runnable but
	// waiting for a CPU across them: its schedstat run_delay, read outside the timed
	// regions, just before the first of a run of back-to-back operations and just after
	// the last (see cpuClock). Only when CPUWaitKnown: the kernel reports it and every
	// reading of the round succeeded.
	CPUWait      time.Duration
	CPUWaitKnown bool
	// Filling is how far the round got with preparing its probe file, when the round was
	// a preparation step (it returned ErrNotPrepared); zero otherwise.
	Filling Filling
}

// Filling is the state of a probe file being prepared (see filler), after a step.
type Filling struct {
	File     string  // which file: "read" (the read probe file) or "commit"
	Path     string  // for messages
	Progress float64 // the share of the file written
	Done     bool    // prepared: the next round uses it
	Reused   bool    // an earlier run's prepared file, taken as it was
}

// Budget is the target's rate limit: an operation waits here before it touches the disk.
type Budget interface {
	// Wait blocks until one operation moving n bytes may start, or ctx ends.
	Wait(ctx context.Context, bytes int) error
	// WouldWait says whether Wait for one operation moving n bytes would block: no token
	// is left. A round counts its thread's CPU wait (Result.CPUWait) over back-to-back
	// operations, and stops counting only before a Wait that may sleep, which is not the
	// disk's. (Not "Free": that word is the filesystem's, as in min_free.)
	WouldWait(bytes int) bool
}

// Unlimited is the budget of the one-shot check and of benchmarks: operations run back to back.
var Unlimited Budget = unlimited{}

type unlimited struct{}

func (unlimited) Wait(ctx context.Context, _ int) error { return ctx.Err() }

// WouldWait is false: an unlimited budget never waits.
func (unlimited) WouldWait(int) bool { return false }

// Inflight holds the start of the outstanding system call, so that the age of an
// operation stuck in the kernel can be reported while it is stuck. The start is kept on
// the monotonic clock: a wall clock stepped while an operation is outstanding (NTP
// correcting a drifted host, date -s) must neither age it by the step, which fires
// DiskprobeProbeStuck on a healthy disk, nor make it young again.
type Inflight struct {
	start atomic.Int64 // inflightEpoch to the start, plus 1 so that 0 is idle
}

// inflightEpoch is the origin of Inflight's starts. Sub between two readings of
// time.Now uses their monotonic readings, and only those, so an offset from it is immune
// to wall clock steps; it costs a subtraction, as UnixNano did.
var inflightEpoch = time.Now()

// begin marks t, a reading of time.Now, as the start of the outstanding operation.
func (i *Inflight) begin(t time.Time) { i.beginAt(t.Sub(inflightEpoch)) }

// beginAt marks the instant d after inflightEpoch, a reading of the clock by
// time.Since(inflightEpoch), as the start of the outstanding operation: a timed region
// reads its clock that way, so that its mark costs a store.
func (i *Inflight) beginAt(d time.Duration) {
	if i != nil {
		i.start.Store(int64(d) + 1)
	}
}

func (i *Inflight) end() {
	if i != nil {
		i.start.Store(0)
	}
}

// Do runs fn as the outstanding operation: file system calls that are not timed but hang
// on a hung file system as the probe's own do, and must show the same age (the
// collector's look at a target between rounds; in a round, round.untimed).
func (i *Inflight) Do(fn func()) {
	i.begin(time.Now())
	defer i.end()
	fn()
}

// Age is how long the outstanding operation has been running at now, a reading of
// time.Now; 0 when idle.
func (i *Inflight) Age(now time.Time) time.Duration {
	s := i.start.Load()
	if s == 0 {
		return 0
	}
	return now.Sub(inflightEpoch) - time.Duration(s-1)
}

// Env is what a round needs from the scheduler.
type Env struct {
	Budget   Budget
	Inflight *Inflight    // may be nil
	Observe  func(Sample) // called once per timed system call; may be nil
	// Notice is told what the probe does differently on this filesystem (no fallocate);
	// may be nil. The daemon logs each distinct notice once per target.
	Notice func(string)
}

func (e *Env) notice(msg string) {
	if e.Notice != nil {
		e.Notice(msg)
	}
}

func (e *Env) observe(s Sample) {
	if e.Observe != nil {
		e.Observe(s)
	}
}

// Prober runs rounds of one probe kind on one target.
type Prober interface {
	// Round runs one round of operations. It returns ErrNotPrepared from a round that
	// prepared the probe's file instead (see Result.Filling), and ErrLowFreeSpace when a
	// write would eat into the free-space floor.
	Round(ctx context.Context, env *Env) (Result, error)
	// Close releases files and buffers; it removes nothing from disk.
	Close() error
}

var (
	// ErrNotPrepared means the round took a step of its probe file's preparation instead
	// of probing (Result.Filling says how far it got): the round is skipped, and the
	// rounds that follow take the next steps until the file is ready.
	ErrNotPrepared = errors.New("probe file is still being prepared")
	// ErrLowFreeSpace means free space is under limits.min_free; write probes stop.
	ErrLowFreeSpace = errors.New("free space is under limits.min_free")
)
