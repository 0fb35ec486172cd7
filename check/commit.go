// The etcd profile's second job and verdict: etcd's backend commit, run by the daemon's
// commit probe, against etcd's 25 ms target for backend_commit.

package check

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// ProbeCommit is the commit job.
const ProbeCommit = config.ProbeCommit

// The commit job: DefaultCommits commits of the daemon's default page count over a file
// of CommitFileSize, and etcd's target for backend_commit.
const (
	DefaultCommits         = 200
	DefaultCommitThreshold = 25 * time.Millisecond
	// CommitFileSize is the database the pages are scattered over: a small cluster's
	// (the measured etcd's was 24 MiB for 3000 pod-sized objects, docs/design.md#the-commit-probe),
	// and small enough for the check to fit beside a real one. The daemon's default,
	// 128 MiB, is a larger cluster's.
	CommitFileSize = 32 * config.MiB
)

// CommitResult is the backend-commit job: Ops commits of Pages pages each.
type CommitResult struct {
	Ops              int
	Pages            int
	PageSize         int
	FileSize         int64
	Elapsed          time.Duration // wall time of the commits, the file's filling left out
	CommitsPerSecond float64
	Commit           Latency
	CPU              CPUWait
	Verdict          Verdict
	Threshold        time.Duration
}

func (r *runner) runCommit(ctx context.Context) func(scratch string) error {
	return func(scratch string) error { return r.commit(ctx, scratch) }
}

func (r *runner) commit(ctx context.Context, scratch string) error {
	ops, pages := r.opts.Commits, config.Default(ProbeCommit).Pages
	p, err := probe.NewCommit(probe.CommitOptions{Dir: scratch, Ops: ops, Pages: pages, FileSize: CommitFileSize})
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	commits := make([]time.Duration, 0, ops)
	var done atomic.Int64
	var first, last time.Time
	env := &probe.Env{Budget: probe.Unlimited, Notice: r.tg.notice, Observe: func(s probe.Sample) {
		last = time.Now()
		if first.IsZero() {
			first = last.Add(-s.Duration)
		}
		commits = append(commits, s.Duration)
		done.Add(1)
	}}
	stop := r.opts.Progress.start(ProbeCommit, func(elapsed time.Duration) (float64, string) {
		n := done.Load()
		if n == 0 {
			return 0, fmt.Sprintf("writing the %s file the commits go to", bytesize.Approx(CommitFileSize))
		}
		return float64(n) / float64(ops), fmt.Sprintf("%d/%d commits", n, ops)
	})
	// The rounds until the file is ready write it, a step each (ErrNotPrepared); the
	// round after the one that finished it commits.
	var res probe.Result
	for {
		res, err = p.Round(ctx, env)
		if !errors.Is(err, probe.ErrNotPrepared) {
			break
		}
	}
	stop(err == nil)
	if err != nil {
		return fmt.Errorf("commit probe: %w", err)
	}
	var cpu CPUWait
	cpu.add(res)
	elapsed := last.Sub(first)
	r.rep.Commit = &CommitResult{
		Ops:              len(commits),
		Pages:            pages,
		PageSize:         os.Getpagesize(),
		FileSize:         CommitFileSize,
		Elapsed:          elapsed,
		CommitsPerSecond: perSecond(float64(len(commits)), elapsed),
		Commit:           Summarize(commits),
		CPU:              cpu,
		Threshold:        DefaultCommitThreshold,
	}
	return nil
}

// judgeCommit gives the commit job's verdict and makes the report's FAIL if it fails:
// etcd wants both figures under their targets.
func (rep *Report) judgeCommit() {
	c := rep.Commit
	if c == nil {
		return
	}
	c.Verdict = Pass
	if c.Commit.P99 >= c.Threshold {
		c.Verdict = Fail
	}
	if rep.Verdict == None || c.Verdict == Fail {
		rep.Verdict = c.Verdict
	}
	if c.Commit.Max > slowestRequest {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the slowest commit took %s: every write etcd applies meanwhile waits for it (etcd's mixin alerts on a backend_commit p99 over 0.25s)", FormatDuration(c.Commit.Max)))
	}
	if msg, ok := c.CPU.note("commit"); ok {
		rep.Warnings = append(rep.Warnings, msg)
	}
}

// commitSection is the commit job's part of the summary.
func (c *CommitResult) section() string {
	return fmt.Sprintf("\ncommit (etcd's backend commit): %d commits of %d x %s page writes at random offsets of a %s file + fdatasync + meta page write + fdatasync, in %s, %.0f commits/s\n",
		c.Ops, c.Pages, bytesize.Approx(int64(c.PageSize)), bytesize.Approx(c.FileSize), formatSeconds(c.Elapsed), c.CommitsPerSecond)
}

// verdictLine is the commit job's line under the verdict.
func (c *CommitResult) verdictLine() string {
	if c.Verdict == Pass {
		return fmt.Sprintf("PASS  commit p99 %s < %s: good enough for etcd's backend (etcd wants p99 backend_commit under 25ms)\n",
			FormatDuration(c.Commit.P99), c.Threshold)
	}
	return fmt.Sprintf("FAIL  commit p99 %s >= %s: too slow for etcd's backend (etcd wants p99 backend_commit under 25ms)\n",
		FormatDuration(c.Commit.P99), c.Threshold)
}

type jsonCommit struct {
	Ops              int     `json:"ops"`
	PagesPerCommit   int     `json:"pages_per_commit"`
	PageSizeBytes    int     `json:"page_size_bytes"`
	FileSizeBytes    int64   `json:"file_size_bytes"`
	DurationSeconds  float64 `json:"duration_seconds"`
	CommitsPerSecond float64 `json:"commits_per_second"`
	CommitSeconds    Latency `json:"commit_seconds"`
	Verdict          Verdict `json:"verdict"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
}

func (c *CommitResult) json() *jsonCommit {
	return &jsonCommit{Ops: c.Ops, PagesPerCommit: c.Pages, PageSizeBytes: c.PageSize, FileSizeBytes: c.FileSize,
		DurationSeconds: c.Elapsed.Seconds(), CommitsPerSecond: c.CommitsPerSecond, CommitSeconds: c.Commit,
		Verdict: c.Verdict, ThresholdSeconds: c.Threshold.Seconds()}
}
