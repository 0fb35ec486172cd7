// The etcd profile: etcd's fio recipe, run by the same probe package the daemon runs,
// and a PASS/FAIL verdict against etcd's targets. etcd's words live in this file only.

package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// The probes check runs.
const (
	ProbeFsync    = config.ProbeFsync
	ProbeRandread = config.ProbeRandread
	ProbeSeqread  = config.ProbeSeqread
)

// jobOrder is the order the jobs run in, whatever --probes says.
var jobOrder = []string{ProbeFsync, ProbeCommit, ProbeRandread, ProbeSeqread}

// Defaults are etcd's fio recipe (--size=22m --bs=2300) and etcd's target for wal_fsync.
const (
	DefaultSize      = 22 * config.MiB
	DefaultBlockSize = 2300
	DefaultDuration  = 10 * time.Second
	DefaultThreshold = 10 * time.Millisecond
)

// The read jobs: 4 KiB random reads from a 256 MiB prepared file, and 256 MiB read in
// 1 MiB blocks, both O_DIRECT.
const (
	ReadFileSize     = 256 * config.MiB
	RandreadBlock    = 4 * config.KiB
	SeqreadBytes     = 256 * config.MiB
	SeqreadBlock     = 1 * config.MiB
	randreadPerRound = 32 // reads between two looks at the clock
)

// Thresholds of the WARN remarks.
const (
	writeCallWarn  = time.Millisecond       // a write(2) of 2300 B into the page cache should take microseconds
	writesPerSec   = 50                     // etcd's hardware guide: 50 sequential IOPS for a light load
	slowestRequest = 500 * time.Millisecond // `etcdctl check perf` fails on a request slower than 0.5 s
	// cpuWaitNote is the share of a job's latency spent by its thread waiting for a CPU
	// above which the remarks say the host, not the disk, made it slow.
	cpuWaitNote = 0.25
)

// Options say what to measure and how.
type Options struct {
	Path      string
	ProbeDir  string        // where the scratch directory goes instead of Path (same filesystem); Path is then only stat'ed
	Probes    []string      // empty: fsync on a directory, randread on a block device
	Size      int64         // bytes written by the fsync job
	BlockSize int           // bytes per write of the fsync job
	Duration  time.Duration // how long randread reads
	Threshold time.Duration // fdatasync p99 under this is PASS
	Commits   int           // commits of the commit job
	Paths     device.Paths
	Progress  *Progress    // nil: no progress output
	Load      *LoadOptions // competing I/O while the jobs measure; nil: none (an idle disk)
}

// Verdict is the answer to "is this disk good enough for etcd?".
type Verdict string

// The verdicts: PASS when the fdatasync p99 is under the threshold and the commit p99
// under etcd's 25 ms (each job that ran), FAIL otherwise.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	// None is the verdict of a run without the fsync and commit probes (a block device,
	// or --probes with neither): there is no p99 to judge.
	None Verdict = "NONE"
)

// Report is what one check measured.
type Report struct {
	Path      string
	Device    *Device // nil when the device could not be resolved
	Verdict   Verdict // FAIL when either job's is
	Threshold time.Duration
	Fsync     *FsyncResult
	Commit    *CommitResult
	Randread  *RandreadResult
	Seqread   *SeqreadResult
	Load      *LoadResult // nil when no load ran
	Warnings  []string
}

// FsyncResult is the etcd WAL job: Ops writes of BlockSize bytes, each with its fdatasync.
type FsyncResult struct {
	Ops             int
	BlockSize       int
	Elapsed         time.Duration // wall time of the whole job
	WritesPerSecond float64
	Fdatasync       Latency
	Write           Latency
	CPU             CPUWait
	Verdict         Verdict // on Fdatasync.P99 against the report's Threshold
}

// CPUWait is how much of a job's time inside its timed calls its thread spent waiting
// for a CPU (probe.Result.CPUWait); not Known where the kernel does not report it.
type CPUWait struct {
	Known   bool // every round's was
	Waited  time.Duration
	InCalls time.Duration
	rounds  int
}

func (c *CPUWait) add(res probe.Result) {
	c.Known = res.CPUWaitKnown && (c.rounds == 0 || c.Known)
	c.rounds++
	c.Waited += res.CPUWait
	c.InCalls += res.IO
}

// note is the remark when the host's CPUs, not the disk, account for much of the latency
// of what: the verdict stays the one fio's figures give, which a busy host slows as well.
func (c CPUWait) note(what string) (string, bool) {
	if !c.Known || c.InCalls <= 0 {
		return "", false
	}
	share := float64(c.Waited) / float64(c.InCalls)
	if share <= cpuWaitNote {
		return "", false
	}
	return fmt.Sprintf("the host's CPUs, not the disk, account for %.0f%% of this %s latency: the probe's thread waited %s for a CPU within its %s of timed calls (a busy node slows etcd the same way, and its cure is CPU, not a disk)",
		share*100, what, FormatDuration(c.Waited), FormatDuration(c.InCalls)), true
}

// RandreadResult is the random-read job.
type RandreadResult struct {
	Ops            int
	Elapsed        time.Duration
	ReadsPerSecond float64
	Read           Latency
	CPU            CPUWait
}

// SeqreadResult is the sequential-read job; throughput is bytes over the time inside the reads.
type SeqreadResult struct {
	Bytes          int64
	IO             time.Duration
	BytesPerSecond float64
}

// ExitCode is the command's exit status for the verdict: 0 PASS (or no verdict), 1 FAIL.
func (r *Report) ExitCode() int {
	if r.Verdict == Fail {
		return 1
	}
	return 0
}

// Run measures opts.Path. Every file it creates lives in PATH/.diskprobe-check-* (or in
// the probe directory, when one is given), which
// is removed before Run returns, whether the run succeeded, failed or ctx was cancelled
// (Ctrl-C). An error means no verdict: the command exits 2.
func Run(ctx context.Context, opts Options) (*Report, error) {
	tg, err := openTarget(ctx, opts.Path, opts.ProbeDir, opts.Paths)
	if err != nil {
		return nil, err
	}
	probes, err := selectProbes(opts.Probes, opts.Path, tg.isDevice)
	if err != nil {
		return nil, err
	}
	if err := tg.checkProbeDir(opts.ProbeDir); err != nil {
		return nil, err
	}
	if tg.isDevice && opts.Load != nil {
		return nil, fmt.Errorf("%s is a block device and --load writes: %w; run check --load on a directory of the filesystem on it", opts.Path, probe.ErrBlockDeviceWrite)
	}
	if err := validate(opts, probes); err != nil {
		return nil, err
	}

	rep := &Report{Path: opts.Path, Threshold: opts.Threshold, Device: tg.device}
	r := &runner{opts: opts, rep: rep, tg: tg}
	err = r.underLoad(ctx, func() (err error) {
		if slices.Contains(probes, ProbeFsync) {
			err = tg.withScratch(opts.ProbeDir, r.fsyncFileSize(), true, r.runFsync(ctx))
		}
		if err == nil && slices.Contains(probes, ProbeCommit) {
			err = tg.withScratch(opts.ProbeDir, CommitFileSize, true, r.runCommit(ctx))
		}
		if err == nil && (slices.Contains(probes, ProbeRandread) || slices.Contains(probes, ProbeSeqread)) {
			err = tg.withReadSource(ctx, opts.ProbeDir, ReadFileSize, opts.Progress, func(src *probe.ReadSource) error {
				return r.runReads(ctx, src, probes)
			})
		}
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted (%w)", context.Cause(ctx))
		}
		return nil, err
	}
	rep.judge()
	rep.Warnings = append(rep.Warnings, tg.noticed...)
	return rep, nil
}

// selectProbes turns --probes into the list to run, in the order they run.
func selectProbes(names []string, path string, isDevice bool) ([]string, error) {
	if len(names) == 0 {
		if isDevice {
			return []string{ProbeRandread}, nil
		}
		return []string{ProbeFsync, ProbeCommit}, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		switch n = strings.TrimSpace(n); n {
		case ProbeFsync, ProbeCommit, ProbeRandread, ProbeSeqread:
			want[n] = true
		case "":
		default:
			return nil, fmt.Errorf("unknown probe %q in --probes (known: fsync, commit, randread, seqread)", n)
		}
	}
	for _, w := range []string{ProbeFsync, ProbeCommit} {
		if isDevice && want[w] {
			return nil, fmt.Errorf("%s is a block device: the %s probe writes, and nothing is ever written to a device; run check on a directory of the filesystem on it, or use --probes=randread,seqread", path, w)
		}
	}
	var out []string
	for _, n := range jobOrder {
		if want[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--probes names no probe")
	}
	return out, nil
}

func validate(opts Options, probes []string) error {
	if slices.Contains(probes, ProbeFsync) {
		if opts.BlockSize <= 0 || opts.BlockSize > config.MaxBlockSize {
			return fmt.Errorf("--block-size must be between 1 and %s bytes", config.FormatSize(config.MaxBlockSize))
		}
		if opts.Size < int64(opts.BlockSize) {
			return fmt.Errorf("--size %d is smaller than one --block-size %d write", opts.Size, opts.BlockSize)
		}
	}
	if slices.Contains(probes, ProbeCommit) && opts.Commits <= 0 {
		return errors.New("--commits must be positive")
	}
	if slices.Contains(probes, ProbeRandread) && opts.Duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if opts.Threshold <= 0 {
		return errors.New("--threshold must be positive")
	}
	if opts.Load != nil {
		if err := opts.Load.Validate(); err != nil {
			return err
		}
	}
	return nil
}

type runner struct {
	opts Options
	rep  *Report
	tg   *target
}

// fsyncOps is how many writes the fsync job does: fio's count for --size and --bs.
func (r *runner) fsyncOps() int { return int(r.opts.Size / int64(r.opts.BlockSize)) }

// fsyncFileSize holds every write after the header, so the file is never cut mid-run:
// each write lands on fallocated, never written blocks, as in fio's recipe.
func (r *runner) fsyncFileSize() int64 {
	return probe.HeaderSize + int64(r.fsyncOps())*int64(r.opts.BlockSize)
}

// runFsync returns the fsync job to run in a scratch directory.
func (r *runner) runFsync(ctx context.Context) func(scratch string) error {
	return func(scratch string) error { return r.fsync(ctx, scratch) }
}

func (r *runner) fsync(ctx context.Context, scratch string) error {
	ops := r.fsyncOps()
	p, err := probe.NewFsync(probe.FsyncOptions{Dir: scratch, Ops: ops, BlockSize: r.opts.BlockSize, FileSize: r.fsyncFileSize()})
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	writes := make([]time.Duration, 0, ops)
	syncs := make([]time.Duration, 0, ops)
	var done atomic.Int64
	env := &probe.Env{Budget: probe.Unlimited, Notice: r.tg.notice, Observe: func(s probe.Sample) {
		switch s.Phase {
		case probe.PhaseWrite:
			writes = append(writes, s.Duration)
		case probe.PhaseFdatasync:
			syncs = append(syncs, s.Duration)
			done.Add(1)
		}
	}}
	start := time.Now()
	stop := r.opts.Progress.start(ProbeFsync, func(elapsed time.Duration) (float64, string) {
		n := done.Load()
		return float64(n) / float64(ops), fmt.Sprintf("%d/%d writes  %s writes/s", n, ops, rate(n, elapsed))
	})
	res, err := p.Round(ctx, env)
	elapsed := time.Since(start)
	stop(err == nil)
	if err != nil {
		return fmt.Errorf("fsync probe: %w", err)
	}
	var cpu CPUWait
	cpu.add(res)
	r.rep.Fsync = &FsyncResult{
		Ops:             len(syncs),
		BlockSize:       r.opts.BlockSize,
		Elapsed:         elapsed,
		WritesPerSecond: perSecond(float64(len(syncs)), elapsed),
		Fdatasync:       Summarize(syncs),
		Write:           Summarize(writes),
		CPU:             cpu,
	}
	return nil
}

func (r *runner) runReads(ctx context.Context, src *probe.ReadSource, probes []string) error {
	if slices.Contains(probes, ProbeRandread) {
		if err := r.runRandread(ctx, src); err != nil {
			return err
		}
	}
	if slices.Contains(probes, ProbeSeqread) {
		if err := r.runSeqread(ctx, src); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) runRandread(ctx context.Context, src *probe.ReadSource) error {
	p, err := probe.NewRandread(src, randreadPerRound, RandreadBlock)
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	var reads []time.Duration
	var done atomic.Int64
	env := &probe.Env{Budget: probe.Unlimited, Notice: r.tg.notice, Observe: func(s probe.Sample) {
		reads = append(reads, s.Duration)
		done.Add(1)
	}}
	d := r.opts.Duration
	stop := r.opts.Progress.start(ProbeRandread, func(elapsed time.Duration) (float64, string) {
		n := done.Load()
		return min(1, elapsed.Seconds()/d.Seconds()), fmt.Sprintf("%d reads  %s reads/s", n, rate(n, elapsed))
	})
	start := time.Now()
	var cpu CPUWait
	for time.Since(start) < d {
		var res probe.Result
		if res, err = p.Round(ctx, env); err != nil {
			break
		}
		cpu.add(res)
	}
	elapsed := time.Since(start)
	stop(err == nil)
	if err != nil {
		return fmt.Errorf("randread probe: %w", err)
	}
	r.rep.Randread = &RandreadResult{
		Ops:            len(reads),
		Elapsed:        elapsed,
		ReadsPerSecond: perSecond(float64(len(reads)), elapsed),
		Read:           Summarize(reads),
		CPU:            cpu,
	}
	return nil
}

func (r *runner) runSeqread(ctx context.Context, src *probe.ReadSource) error {
	p, err := probe.NewSeqread(src, SeqreadBytes, SeqreadBlock)
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	// One round reads all of it sequentially; each timed read is observed, which is
	// what the progress counts.
	var read atomic.Int64
	env := &probe.Env{Budget: probe.Unlimited, Notice: r.tg.notice, Observe: func(probe.Sample) { read.Add(SeqreadBlock) }}
	stop := r.opts.Progress.start(ProbeSeqread, func(elapsed time.Duration) (float64, string) {
		n := read.Load()
		return float64(n) / SeqreadBytes, fmt.Sprintf("%s/%s in %s blocks", bytesize.Approx(n), bytesize.Approx(SeqreadBytes), bytesize.Approx(SeqreadBlock))
	})
	res, err := p.Round(ctx, env)
	stop(err == nil)
	if err != nil {
		return fmt.Errorf("seqread probe: %w", err)
	}
	r.rep.Seqread = &SeqreadResult{Bytes: res.Bytes, IO: res.IO, BytesPerSecond: perSecond(float64(res.Bytes), res.IO)}
	return nil
}

// judge gives the verdict and the remarks.
func (rep *Report) judge() {
	rep.judgeFsync()
	rep.judgeCommit()
	rep.judgeLoad()
	if rr := rep.Randread; rr != nil {
		if msg, ok := rr.CPU.note("random read"); ok {
			rep.Warnings = append(rep.Warnings, msg)
		}
	}
}

func (rep *Report) judgeFsync() {
	f := rep.Fsync
	if f == nil {
		rep.Verdict = None
		return
	}
	th := rep.Threshold
	f.Verdict = Pass
	if f.Fdatasync.P99 >= th {
		f.Verdict = Fail
	}
	rep.Verdict = f.Verdict
	warn := func(format string, args ...any) { rep.Warnings = append(rep.Warnings, fmt.Sprintf(format, args...)) }
	if f.Fdatasync.P999 > th {
		warn("fdatasync p99.9 %s is above the %s threshold: about 1 WAL sync in 1000 is that slow", FormatDuration(f.Fdatasync.P999), th)
	}
	if f.Fdatasync.Max > slowestRequest {
		warn("the slowest fdatasync took %s: `etcdctl check perf` fails on a request slower than %s", FormatDuration(f.Fdatasync.Max), slowestRequest)
	}
	if f.Write.P99 > writeCallWarn {
		warn("write(2) p99 %s is above %s: the write call itself is slow (page cache or filesystem contention), and it adds to every WAL append", FormatDuration(f.Write.P99), writeCallWarn)
	}
	if f.WritesPerSecond < writesPerSec {
		warn("%.0f writes/s is under the %d sequential IOPS etcd's hardware guide names for a light load", f.WritesPerSecond, writesPerSec)
	}
	if msg, ok := f.CPU.note("write+fdatasync"); ok {
		warn("%s", msg)
	}
}
