// Competing I/O for the etcd profile (--load): etcd's disk is never idle, so a verdict
// measured on an idle disk can PASS where etcd, beside its own backend writes, its
// compactions and snapshots and its neighbours' I/O, would not.

package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// The default load: what an etcd member and its neighbours do to a control-plane node's
// disk besides the WAL appends the fsync job stands for.
const (
	// DefaultLoadWriteIOPS and DefaultLoadReadIOPS are the background IOPS of Replicated
	// kURL's etcd host preflight (troubleshoot's filesystemPerformance collector with
	// backgroundWriteIOPS: 300 and backgroundReadIOPS: 50, 4 KiB O_DIRECT at random
	// offsets), run for the same reason. 300 writes/s is also 30 scattered page writes per
	// commit at etcd's backend commit rate (one every 100 ms, --backend-batch-interval).
	DefaultLoadWriteIOPS = 300
	DefaultLoadReadIOPS  = 50
	// DefaultLoadBlockSize is kURL's 4 KiB, also bbolt's page size on x86-64 and arm64.
	DefaultLoadBlockSize = 4 * config.KiB
	// DefaultLoadBandwidth is a compaction/snapshot neighbour: a 2 GiB database (etcd's
	// default --quota-backend-bytes) written out in about two minutes, as a
	// defragmentation, a backup's `etcdctl snapshot save` or a member receiving a
	// snapshot does.
	DefaultLoadBandwidth = 16 * config.MiB
	// LoadStreamBlock is the bandwidth job's write: large sequential writes as the page
	// cache's writeback of a streamed file sends them.
	LoadStreamBlock = 1 * config.MiB
	// LoadFileSize is the load's own file, written in full before the load starts (reads
	// of never-written blocks are "too good to be true"), the random and the sequential
	// I/O spread over all of it.
	LoadFileSize = 256 * config.MiB
	// MaxLoadBlockSize bounds --load-block-size: the IOPS jobs stand for small I/O; a
	// stream of large writes is --load-bandwidth.
	MaxLoadBlockSize = 1 * config.MiB
	// loadIOPSDepth is the I/Os each IOPS job may keep in flight: enough to hold its rate
	// while one I/O takes a while (8 at 300/s holds up to 26 ms per I/O), as kURL's six
	// write jobs do. A job never exceeds its rate whatever the depth.
	loadIOPSDepth = 8
	// loadStreamDepth is the bandwidth job's: 4 MiB in flight, as a writeback flusher
	// keeps a few requests of a streamed file queued.
	loadStreamDepth = 4
	// loadWarmup runs the load before the first measured I/O, so that the first samples
	// see the queues the load builds (kURL waits 10 s; a token bucket reaches its rate
	// at once, the device's queues within a few hundred milliseconds).
	loadWarmup = 2 * time.Second
	// loadShortfall is the share of a requested rate under which the load fell short,
	// the 90 % under which `etcdctl check perf` says a throughput target was missed.
	loadShortfall = 0.9
)

// LoadOptions are the competing I/O to run while the jobs measure: random reads and
// random writes of BlockSize at rates, and sequential writes at a bandwidth. A rate of 0
// turns that part off.
type LoadOptions struct {
	ReadIOPS  int
	WriteIOPS int
	Bandwidth int64 // bytes/s of sequential writes in LoadStreamBlock writes
	BlockSize int
}

// DefaultLoad is --load with none of the --load-* flags.
func DefaultLoad() LoadOptions {
	return LoadOptions{ReadIOPS: DefaultLoadReadIOPS, WriteIOPS: DefaultLoadWriteIOPS, Bandwidth: DefaultLoadBandwidth, BlockSize: DefaultLoadBlockSize}
}

// Validate says which flag is wrong, by name.
func (l LoadOptions) Validate() error {
	switch {
	case l.ReadIOPS < 0:
		return fmt.Errorf("--load-read-iops %d: at least 0 (0 runs no reads)", l.ReadIOPS)
	case l.WriteIOPS < 0:
		return fmt.Errorf("--load-write-iops %d: at least 0 (0 runs no random writes)", l.WriteIOPS)
	case l.Bandwidth < 0:
		return fmt.Errorf("--load-bandwidth %d: at least 0 (0 runs no sequential writes)", l.Bandwidth)
	case l.Bandwidth > 0 && l.Bandwidth < LoadStreamBlock:
		return fmt.Errorf("--load-bandwidth %s: at least %s a second (one %s write a second), or 0 for none",
			config.FormatSize(l.Bandwidth), config.FormatSize(LoadStreamBlock), bytesize.Exact(LoadStreamBlock))
	case l.ReadIOPS == 0 && l.WriteIOPS == 0 && l.Bandwidth == 0:
		return errors.New("--load with --load-read-iops=0, --load-write-iops=0 and --load-bandwidth=0 runs no load; drop --load to measure the idle disk")
	case l.BlockSize < 512 || l.BlockSize%512 != 0 || l.BlockSize > MaxLoadBlockSize:
		return fmt.Errorf("--load-block-size %d: a multiple of 512 B up to %s", l.BlockSize, config.FormatSize(MaxLoadBlockSize))
	}
	return nil
}

// LoadResult is the load that ran beside the measured jobs: what was asked, and what the
// disk took: the I/O completed over the time the load ran (its warm-up and the jobs; the
// preparation of its own file apart). Completed I/O over seconds, not the jobs' few
// milliseconds on a fast disk, whose rate a single burst would decide.
type LoadResult struct {
	Requested LoadOptions
	Ran       time.Duration
	ReadOps   int64
	WriteOps  int64
	Bytes     int64 // of the sequential writes
	ReadIOPS  float64
	WriteIOPS float64
	// BytesPerSecond is the sequential writes' achieved bandwidth.
	BytesPerSecond float64
}

// The parts of the load, as the JSON and the remarks name them.
const (
	loadRead      = "read_iops"
	loadWrite     = "write_iops"
	loadBandwidth = "write_bytes_per_second"
)

// FellShort lists the parts of the load whose achieved rate is under 90 % of the
// requested one: the disk (or the host) could not take them beside the measured job.
func (l *LoadResult) FellShort() []string {
	short := []string{}
	for _, p := range []struct {
		name      string
		got, want float64
	}{
		{loadRead, l.ReadIOPS, float64(l.Requested.ReadIOPS)},
		{loadWrite, l.WriteIOPS, float64(l.Requested.WriteIOPS)},
		{loadBandwidth, l.BytesPerSecond, float64(l.Requested.Bandwidth)},
	} {
		if p.want > 0 && p.got < loadShortfall*p.want {
			short = append(short, p.name)
		}
	}
	return short
}

// load is the competing I/O under way.
type load struct {
	opts   LoadOptions
	src    *probe.ReadSource
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time // when the jobs started, after the file's preparation
	mu     sync.Mutex
	errs   []error
	done   LoadResult // the I/O the jobs completed
}

// pacer is a load job's rate: a token bucket that holds as many operations (or stream
// writes) as the job keeps in flight, so that I/O is paced evenly, and a job that a slow
// I/O held up catches up by at most a queue's worth (fio's rate_iops catches up too).
// With a bucket of one, every stall of the disk was lost for good: the default load fell
// to 89 % of its 300 writes/s beside a device that takes twice that.
type pacer struct {
	lim     *xrate.Limiter
	byBytes bool // tokens are bytes (the bandwidth job), else operations
}

// newPacer is a pacer at r tokens a second holding burst, empty at the start: a full
// bucket would add a burst to the first second's rate and to the achieved one.
func newPacer(r float64, burst int, byBytes bool) *pacer {
	lim := xrate.NewLimiter(xrate.Limit(r), burst)
	lim.AllowN(time.Now(), burst)
	return &pacer{lim: lim, byBytes: byBytes}
}

func (p *pacer) tokens(n int) int {
	if p.byBytes {
		return n
	}
	return 1
}

func (p *pacer) Wait(ctx context.Context, n int) error {
	return p.lim.WaitN(ctx, p.tokens(n))
}

func (p *pacer) WouldWait(n int) bool { return p.lim.Tokens() < float64(p.tokens(n)) }

// startLoad prepares the load's file in scratch and starts the jobs; stop ends them.
func (r *runner) startLoad(ctx context.Context, scratch string) (*load, error) {
	opts := *r.opts.Load
	src, err := probe.NewReadFile(scratch, LoadFileSize, 0, r.tg.align)
	if err != nil {
		return nil, err
	}
	var written atomic.Int64
	total := float64(probe.HeaderSize + LoadFileSize)
	stop := r.opts.Progress.start("load", func(time.Duration) (float64, string) {
		n := written.Load()
		return float64(n) / total, fmt.Sprintf("%s/%s of the load's file", bytesize.Approx(n), bytesize.Approx(LoadFileSize))
	})
	err = src.Prepare(ctx, &probe.Env{Budget: probe.Unlimited, Notice: r.tg.notice}, func(res probe.Result) { written.Add(res.Bytes) })
	stop(err == nil)
	if err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("preparing the load's file: %w", err)
	}
	jobCtx, cancel := context.WithCancel(ctx)
	l := &load{opts: opts, src: src, cancel: cancel, start: time.Now()}
	// A day: the jobs end when the measurement does, by cancel.
	const forever = 24 * time.Hour
	if opts.ReadIOPS > 0 {
		l.run(jobCtx, probe.QueueJob{BlockSize: opts.BlockSize, Depth: loadIOPSDepth, Random: true, ReadMix: 100, Runtime: forever},
			newPacer(float64(opts.ReadIOPS), loadIOPSDepth, false))
	}
	if opts.WriteIOPS > 0 {
		l.run(jobCtx, probe.QueueJob{BlockSize: opts.BlockSize, Depth: loadIOPSDepth, Random: true, ReadMix: 0, Runtime: forever},
			newPacer(float64(opts.WriteIOPS), loadIOPSDepth, false))
	}
	if opts.Bandwidth > 0 {
		l.run(jobCtx, probe.QueueJob{BlockSize: LoadStreamBlock, Depth: loadStreamDepth, Random: false, ReadMix: 0, Runtime: forever},
			newPacer(float64(opts.Bandwidth), loadStreamDepth*LoadStreamBlock, true))
	}
	r.opts.Progress.note(fmt.Sprintf("load: %s; measuring in %s", opts.describe(), loadWarmup))
	select {
	case <-time.After(loadWarmup):
	case <-ctx.Done():
	}
	if err := l.err(); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

func (l *load) run(ctx context.Context, job probe.QueueJob, p *pacer) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		res, err := probe.RunQueue(ctx, l.src, job, &probe.Env{Budget: p})
		l.mu.Lock()
		defer l.mu.Unlock()
		l.done.ReadOps += int64(res.Read.Ops)
		if !job.Random { // the stream
			l.done.Bytes += res.Write.Bytes
		} else {
			l.done.WriteOps += int64(res.Write.Ops)
		}
		if err != nil && ctx.Err() == nil {
			// A job that ended on its own (an I/O error) leaves the rest of the
			// measurement without the load it asked for.
			l.errs = append(l.errs, fmt.Errorf("competing load: %w", err))
		}
	}()
}

func (l *load) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// stop ends the jobs (those in flight complete), closes the file and says what the
// jobs did: the I/O they completed over the time they ran.
func (l *load) stop() *LoadResult {
	l.cancel()
	l.wg.Wait()
	_ = l.src.Close()
	res := l.done
	res.Requested = l.opts
	res.Ran = time.Since(l.start)
	res.ReadIOPS = perSecond(float64(res.ReadOps), res.Ran)
	res.WriteIOPS = perSecond(float64(res.WriteOps), res.Ran)
	res.BytesPerSecond = perSecond(float64(res.Bytes), res.Ran)
	return &res
}

// describe says what the load asks for.
func (l LoadOptions) describe() string {
	var parts []string
	if l.ReadIOPS > 0 {
		parts = append(parts, fmt.Sprintf("%d random reads/s", l.ReadIOPS))
	}
	if l.WriteIOPS > 0 {
		parts = append(parts, fmt.Sprintf("%d random writes/s", l.WriteIOPS))
	}
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += " and "
		}
		s += p
	}
	if s != "" {
		s += " of " + bytesize.Exact(int64(l.BlockSize))
	}
	if l.Bandwidth > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s/s of sequential writes in %s blocks", bytesize.Approx(l.Bandwidth), bytesize.Exact(LoadStreamBlock))
	}
	return s + ", O_DIRECT, in a file of its own"
}

// underLoad runs measure with the load of r.opts.Load running beside it, in a scratch
// directory of its own (removed whatever happens), or plainly when no load was asked.
func (r *runner) underLoad(ctx context.Context, measure func() error) error {
	if r.opts.Load == nil {
		return measure()
	}
	return r.tg.withScratch(r.opts.ProbeDir, probe.HeaderSize+LoadFileSize, false, func(scratch string) error {
		l, err := r.startLoad(ctx, scratch)
		if err != nil {
			return err
		}
		err = measure()
		r.rep.Load = l.stop()
		return errors.Join(err, l.err())
	})
}

// judgeLoad says when the load fell short: the verdict was then given on a disk that
// could not take the load asked of it as well as the check's own I/O.
func (rep *Report) judgeLoad() {
	l := rep.Load
	if l == nil {
		return
	}
	short := l.FellShort()
	if len(short) == 0 {
		return
	}
	msg := "the competing load fell short of what was asked ("
	for i, part := range short {
		if i > 0 {
			msg += ", "
		}
		msg += l.achievedOf(part)
	}
	msg += "): the disk could not take it beside the check's own I/O, so the load was too heavy for this disk"
	if rep.Verdict == Fail {
		msg += "; the FAIL is the disk saturated by the load, and a lighter --load (or none) says how it does at less"
	}
	rep.Warnings = append(rep.Warnings, msg)
}

// achievedOf is "120 of 300 write IOPS (40%)".
func (l *LoadResult) achievedOf(part string) string {
	switch part {
	case loadRead:
		return fmt.Sprintf("%.0f of %d read IOPS (%.0f%%)", l.ReadIOPS, l.Requested.ReadIOPS, 100*l.ReadIOPS/float64(l.Requested.ReadIOPS))
	case loadWrite:
		return fmt.Sprintf("%.0f of %d write IOPS (%.0f%%)", l.WriteIOPS, l.Requested.WriteIOPS, 100*l.WriteIOPS/float64(l.Requested.WriteIOPS))
	}
	return fmt.Sprintf("%s/s of %s/s sequential writes (%.0f%%)", bytesize.Approx(int64(l.BytesPerSecond)), bytesize.Approx(l.Requested.Bandwidth),
		100*l.BytesPerSecond/float64(l.Requested.Bandwidth))
}

// table writes the load beside the jobs it ran with: requested and achieved, side by side.
func (l *LoadResult) table(b *strings.Builder) {
	fmt.Fprintf(b, "\nload (competing I/O, %s from its warm-up to the end of the jobs): %s\n", formatSeconds(l.Ran), l.Requested.describe())
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintf(tw, "  %-12s\trequested\tachieved\t\n", "load")
	row := func(name string, want, got float64, format string) {
		_, _ = fmt.Fprintf(tw, "  %-12s\t"+format+"\t"+format+"\t\n", name, want, got)
	}
	row("read IOPS", float64(l.Requested.ReadIOPS), l.ReadIOPS, "%.0f")
	row("write IOPS", float64(l.Requested.WriteIOPS), l.WriteIOPS, "%.0f")
	row("write MiB/s", float64(l.Requested.Bandwidth)/(1<<20), l.BytesPerSecond/(1<<20), "%.1f")
	_ = tw.Flush()
}

// besideVerdict is the line under the verdict that says which load it was given under.
func (l *LoadResult) besideVerdict() string {
	short := l.FellShort()
	if len(short) == 0 {
		var parts []string
		if l.Requested.ReadIOPS > 0 {
			parts = append(parts, fmt.Sprintf("%.0f read IOPS", l.ReadIOPS))
		}
		if l.Requested.WriteIOPS > 0 {
			parts = append(parts, fmt.Sprintf("%.0f write IOPS", l.WriteIOPS))
		}
		if l.Requested.Bandwidth > 0 {
			parts = append(parts, fmt.Sprintf("%.1f MiB/s of sequential writes", l.BytesPerSecond/(1<<20)))
		}
		return "under load: " + strings.Join(parts, ", ") + ", as requested"
	}
	parts := []string{}
	for _, part := range short {
		parts = append(parts, l.achievedOf(part))
	}
	return "under a load that fell short: " + strings.Join(parts, ", ") + " (see WARN)"
}

// The load in the JSON output; docs/check.md documents each field.
type jsonLoad struct {
	Requested       jsonLoadRates `json:"requested"`
	Achieved        jsonLoadRates `json:"achieved"`
	BlockSizeBytes  int           `json:"block_size_bytes"`
	StreamBlockSize int           `json:"stream_block_size_bytes"`
	DurationSeconds float64       `json:"duration_seconds"`
	FellShort       []string      `json:"fell_short"`
}

type jsonLoadRates struct {
	ReadIOPS            float64 `json:"read_iops"`
	WriteIOPS           float64 `json:"write_iops"`
	WriteBytesPerSecond float64 `json:"write_bytes_per_second"`
}

func (l *LoadResult) json() *jsonLoad {
	return &jsonLoad{
		Requested:       jsonLoadRates{float64(l.Requested.ReadIOPS), float64(l.Requested.WriteIOPS), float64(l.Requested.Bandwidth)},
		Achieved:        jsonLoadRates{l.ReadIOPS, l.WriteIOPS, l.BytesPerSecond},
		BlockSizeBytes:  l.Requested.BlockSize,
		StreamBlockSize: LoadStreamBlock,
		DurationSeconds: l.Ran.Seconds(),
		FellShort:       l.FellShort(),
	}
}

// DocumentedLoadJSONFields are the fields of "load" in the JSON output of a run with
// --load (null without), as paths of object keys; docs/check.md documents each.
var DocumentedLoadJSONFields = func() [][]string {
	fields := [][]string{{"load", "block_size_bytes"}, {"load", "stream_block_size_bytes"}, {"load", "duration_seconds"}, {"load", "fell_short"}}
	for _, side := range []string{"requested", "achieved"} {
		for _, k := range []string{loadRead, loadWrite, loadBandwidth} {
			fields = append(fields, []string{"load", side, k})
		}
	}
	return fields
}()
