package alertreplay

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// Phase is a stretch of time in which the disk's fdatasyncs follow one distribution.
type Phase struct {
	Name     string
	Duration time.Duration
	Latency  Distribution
	Busy     float64 // diskprobe_device_busy_ratio: the device's busy share from others' I/O
	// OtherIOPS is diskprobe_device_other_iops: others' I/Os a second on the device, what they
	// ask of it (the busy ratio is that times how long the disk takes to serve them).
	OtherIOPS float64
	// LoadSwing varies others' IOPS by up to ± this share of OtherIOPS, a new level every
	// loadStep (deterministic per member): a group's members carry loads that move.
	LoadSwing float64
	// LoadScale, when set, makes latency rise with load: each fdatasync takes its sample times
	// 1 + others' IOPS / LoadScale (a disk serving others queues the probe behind them).
	LoadScale float64
	// CPUWait, when set, is how long each fdatasync's thread waits for a CPU on a starved host,
	// added to its latency and counted in diskprobe_probe_cpu_wait_seconds_total.
	CPUWait Distribution
	// Freeze, when set, stops the disk's I/O at times: a fdatasync issued during a freeze
	// returns when the freeze ends.
	Freeze *Freeze
	// Ceiling, when set, is the write IOPS the device is held at in this phase with work
	// waiting (a provider's limit, a throttle): from recognition on, the exporter reports
	// diskprobe_device_at_ceiling 1 and diskprobe_device_ceiling_iops{direction="write"}.
	Ceiling float64
	// Drain is what the volume's burst bucket loses a second in this phase (I/Os spent over
	// its refill; negative refills it). Only with a scenario's Volume that has a Bucket.
	Drain float64
}

// Volume is a scenario's volume block (issue 42): what the volume was sold as, which the
// exporter reports (diskprobe_volume_info, diskprobe_volume_limit_iops) and, for a volume with
// a burst bucket, the balance it estimates (starting full) and the time until it is empty at
// the phase's Drain.
type Volume struct {
	Type            string
	Baseline, Burst float64 // IOPS; Burst 0: no bucket
	Bucket          float64 // I/Os the bucket holds
}

// recognition is how long the exporter takes to recognise a ceiling after the device
// reaches it (minutes of flat counters while work waits; the daemon's own tests measure it).
const recognition = 3 * time.Minute

// Freeze is a disk that stops answering For at a time, every Every, the first After the phase
// starts (a backup's fsfreeze, a device reset, a path failover).
type Freeze struct {
	Every, For, After time.Duration
}

// until is when the freeze holding t ends, for a phase that started at start; the zero time
// when t falls in no freeze.
func (f *Freeze) until(start, t time.Time) time.Time {
	d := t.Sub(start) - f.After
	if d < 0 {
		return time.Time{}
	}
	if in := d % f.Every; in < f.For {
		return t.Add(f.For - in)
	}
	return time.Time{}
}

// Probing is the exporter's fsync probe as the simulation runs it.
type Probing struct {
	Interval time.Duration // between rounds, before jitter
	Ops      int           // fdatasyncs a round
	Jitter   float64       // ± share of Interval
	Scrape   time.Duration
	// Buckets are the histogram's classic edges: collector.LatencyBuckets when nil (the
	// fdatasync histogram), collector.CommitBuckets for the commit probe.
	Buckets []float64
}

// edges are p's classic bucket edges.
func (p Probing) edges() []float64 {
	if p.Buckets == nil {
		return collector.LatencyBuckets
	}
	return p.Buckets
}

// DefaultProbing is the exporter's default fsync probe (config.Default(config.ProbeFsync), the runner's
// ±10 % jitter) under a 15 s scrape.
var DefaultProbing = Probing{Interval: config.Default(config.ProbeFsync).Interval, Ops: config.Default(config.ProbeFsync).Ops, Jitter: 0.1, Scrape: 15 * time.Second}

// exporter is the simulated exporter's state: the fsync probe's rounds laid on a timeline,
// each fdatasync counted into the classic buckets when it completes.
type exporter struct {
	rng     *rand.Rand
	probing Probing
	phases  []Phase
	ends    []time.Time // end of each phase
	start   time.Time
	seed    uint64 // the member's, for its load's levels

	nextRound time.Time
	pending   []op // the current round's fdatasyncs not yet completed

	buckets     []uint64 // per edge of probing.edges(), cumulative at scrape
	count       uint64
	sum         float64
	cpuWait     float64 // diskprobe_probe_cpu_wait_seconds_total{probe="fsync"}
	runs        uint64
	lastSuccess time.Time
	// skipped is diskprobe_probe_skipped_total{probe="fsync",reason="inflight"}: rounds that
	// fell due while the previous one still ran. As in the exporter, its series appears at the
	// first skip.
	skipped uint64

	// ceilings: the exporter reports the issue-42 series (at_ceiling, the ceiling, the volume).
	ceilings bool
	volume   *Volume
}

type op struct {
	start, end time.Time
	seconds    float64 // the fdatasync
	wait       float64 // of which waiting for a CPU
}

// writeSeconds is the fsync probe's write call before each fdatasync: a page-cache copy of
// 2300 bytes, tens of microseconds, and never what the rules are about.
const writeSeconds = 20e-6

func newExporter(seed uint64, p Probing, phases []Phase, start time.Time) *exporter {
	e := &exporter{
		rng:       rand.New(rand.NewPCG(seed, 0x6469736b70726f62)),
		probing:   p,
		phases:    phases,
		start:     start,
		seed:      seed,
		nextRound: start.Add(time.Duration(rand.New(rand.NewPCG(seed, 1)).Float64() * float64(p.Interval))),
		buckets:   make([]uint64, len(p.edges())),
	}
	t := start
	for _, ph := range phases {
		t = t.Add(ph.Duration)
		e.ends = append(e.ends, t)
	}
	return e
}

func (e *exporter) phaseAt(t time.Time) *Phase {
	return &e.phases[e.phaseIndex(t)]
}

func (e *exporter) phaseIndex(t time.Time) int {
	for i, end := range e.ends {
		if t.Before(end) {
			return i
		}
	}
	return len(e.phases) - 1
}

// frozenUntil is when the freeze holding t ends, the zero time when the disk answers at t.
func (e *exporter) frozenUntil(t time.Time) time.Time {
	i := e.phaseIndex(t)
	ph := &e.phases[i]
	if ph.Freeze == nil {
		return time.Time{}
	}
	return ph.Freeze.until(e.ends[i].Add(-ph.Duration), t)
}

// advance runs the probe up to t: rounds start on a jittered schedule, a round that falls
// due while the previous one still runs is skipped and counted (as the runner does), and
// each fdatasync is counted when it completes. A fdatasync issued during a freeze returns
// when the freeze ends (the syncs after it in the round are issued after the freeze).
func (e *exporter) advance(t time.Time) {
	for {
		if len(e.pending) > 0 {
			o := e.pending[0]
			if o.end.After(t) {
				return
			}
			e.observe(o.seconds)
			e.cpuWait += o.wait
			e.pending = e.pending[1:]
			if len(e.pending) == 0 {
				e.runs++
				e.lastSuccess = o.end
			}
			continue
		}
		if e.nextRound.After(t) {
			return
		}
		at := e.nextRound
		for range e.probing.Ops {
			ph := e.phaseAt(at)
			s, w := ph.Latency.Sample(e.rng), 0.0
			if ph.LoadScale > 0 {
				s *= 1 + e.otherIOPS(at)/ph.LoadScale
			}
			if ph.CPUWait != nil {
				w = ph.CPUWait.Sample(e.rng)
				s += w
			}
			if until := e.frozenUntil(at); !until.IsZero() {
				s += until.Sub(at).Seconds()
			}
			d := time.Duration((s + writeSeconds) * float64(time.Second))
			e.pending = append(e.pending, op{start: at, end: at.Add(d), seconds: s, wait: w})
			at = at.Add(d)
		}
		// The round's own due time, then every one that falls due while the round runs: skipped.
		for due := 0; !e.nextRound.After(at); due++ {
			if due > 0 {
				e.skipped++
			}
			e.nextRound = e.nextRound.Add(time.Duration(float64(e.probing.Interval) * (1 - e.probing.Jitter + 2*e.probing.Jitter*e.rng.Float64())))
		}
	}
}

func (e *exporter) observe(s float64) {
	for i, le := range e.probing.edges() {
		if s <= le {
			e.buckets[i]++
		}
	}
	e.count++
	e.sum += s
}

// loadStep is how long others' IOPS hold a level when they swing.
const loadStep = 10 * time.Minute

// otherIOPS is diskprobe_device_other_iops at t: the phase's, swung by its LoadSwing to a
// level that holds for loadStep, drawn from the member's seed and the step (not from the
// latency's random stream, which stays as it was).
func (e *exporter) otherIOPS(t time.Time) float64 {
	ph := e.phaseAt(t)
	if ph.LoadSwing == 0 {
		return ph.OtherIOPS
	}
	x := e.seed ^ uint64(t.Sub(e.start)/loadStep)*0x9e3779b97f4a7c15
	x ^= x >> 30 // splitmix64's finaliser
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	return ph.OtherIOPS * (1 + ph.LoadSwing*(2*u-1))
}

// inflight is diskprobe_probe_inflight_seconds at t: the age of the fdatasync in progress.
func (e *exporter) inflight(t time.Time) float64 {
	if len(e.pending) == 0 || e.pending[0].start.After(t) {
		return 0
	}
	return t.Sub(e.pending[0].start).Seconds()
}

// member is one exporter of a group: the same target on another instance.
type member struct {
	instance, cluster string
	serial            string
	phases            []Phase
	seed              uint64
}

// series are the exporter's series the rules read, for one target, in the order values
// writes them.
type series struct {
	labels []labels.Labels
	refs   []storage.SeriesRef
	// skipped is the index of diskprobe_probe_skipped_total, left out until the first skip.
	skipped int
	// ceiling is the index of diskprobe_device_at_ceiling, the first of the issue-42 series
	// (withCeilings); 0 without them.
	ceiling int
}

const (
	job      = "diskprobe"
	instance = "replay:10052"
	target   = "disk"
)

func newSeries(model string, m member, edges []float64) *series {
	base := func(name string, kv ...string) labels.Labels {
		kv = append([]string{"__name__", name, "job", job, "instance", m.instance}, kv...)
		if m.cluster != "" {
			kv = append(kv, GroupLabel, m.cluster)
		}
		return labels.FromStrings(kv...)
	}
	s := &series{}
	for _, le := range edges {
		s.labels = append(s.labels, base("diskprobe_fdatasync_duration_seconds_bucket", "target", target, "le", formatLe(le)))
	}
	s.labels = append(s.labels,
		base("diskprobe_fdatasync_duration_seconds_bucket", "target", target, "le", "+Inf"),
		base("diskprobe_fdatasync_duration_seconds_count", "target", target),
		base("diskprobe_fdatasync_duration_seconds_sum", "target", target),
		base("diskprobe_write_duration_seconds_count", "target", target),
		base("diskprobe_write_duration_seconds_sum", "target", target),
		base("diskprobe_probe_cpu_wait_seconds_total", "target", target, "probe", "fsync"),
		base("diskprobe_probe_runs_total", "target", target, "probe", "fsync"),
		base("diskprobe_probe_errors_total", "target", target, "probe", "fsync"),
		base("diskprobe_probe_last_success_timestamp_seconds", "target", target, "probe", "fsync"),
		base("diskprobe_probe_inflight_seconds", "target", target, "probe", "fsync"),
		base("diskprobe_device_busy_ratio", "target", target),
		base("diskprobe_device_other_iops", "target", target),
		base("diskprobe_target_info", "target", target, "path", "/var/lib/etcd", "kind", "directory", "device", "sda", "model", model, "serial", m.serial, "rotational", "0"),
		base("diskprobe_config_last_reload_successful"),
		base("diskprobe_config_last_reload_success_timestamp_seconds"),
		base("up"),
		base("diskprobe_probe_skipped_total", "target", target, "probe", "fsync", "reason", "inflight"),
	)
	s.skipped = len(s.labels) - 1
	s.refs = make([]storage.SeriesRef, len(s.labels))
	return s
}

// withCeilings adds the series of a device's ceiling and the scenario's volume (issue 42):
// diskprobe_device_at_ceiling (whenever the target has device context) and the rest when
// there is something to say (absent, in values, while there is not).
func (s *series) withCeilings(v *Volume) {
	base := s.labels[0]
	l := func(name string, kv ...string) labels.Labels {
		b := labels.NewBuilder(base).Del("le").Set("__name__", name)
		for i := 0; i < len(kv); i += 2 {
			b.Set(kv[i], kv[i+1])
		}
		return b.Labels()
	}
	s.ceiling = len(s.labels)
	s.labels = append(s.labels,
		l("diskprobe_device_at_ceiling"),
		l("diskprobe_device_ceiling_iops", "direction", "write"))
	if v != nil {
		s.labels = append(s.labels,
			l("diskprobe_volume_info", "type", v.Type),
			l("diskprobe_volume_limit_iops", "tier", "baseline"))
		if v.Bucket > 0 {
			s.labels = append(s.labels,
				l("diskprobe_volume_limit_iops", "tier", "burst"),
				l("diskprobe_volume_burst_balance_ratio"),
				l("diskprobe_volume_burst_empty_seconds"))
		}
	}
	s.refs = make([]storage.SeriesRef, len(s.labels))
}

// formatLe writes a bucket edge as client_golang's text format does.
func formatLe(le float64) string { return strconv.FormatFloat(le, 'g', -1, 64) }

// values are the series' values at t, in newSeries's order.
func (e *exporter) values(t time.Time, v []float64) []float64 {
	v = v[:0]
	for _, b := range e.buckets {
		v = append(v, float64(b))
	}
	last := 0.0
	if !e.lastSuccess.IsZero() {
		last = float64(e.lastSuccess.UnixNano()) / 1e9
	}
	v = append(v, float64(e.count), float64(e.count), e.sum,
		float64(e.count), float64(e.count)*writeSeconds, e.cpuWait,
		float64(e.runs), 0, last,
		e.inflight(t), e.phaseAt(t).Busy, e.otherIOPS(t), 1,
		1, float64(e.start.Unix()), 1,
		float64(e.skipped))
	if !e.ceilings {
		return v
	}
	at, ceiling := 0.0, e.recognised(t)
	if ceiling > 0 {
		at = 1
	}
	v = append(v, at, ceiling)
	if e.volume != nil {
		v = append(v, 1, e.volume.Baseline)
		if e.volume.Bucket > 0 {
			balance, drain := e.balance(t)
			empty := math.Inf(1)
			switch {
			case balance <= 0:
				empty = 0
			case drain > 0:
				empty = balance / drain
			}
			v = append(v, e.volume.Burst, balance/e.volume.Bucket, empty)
		}
	}
	return v
}

// recognised is the ceiling the exporter reports at t: the phase's, once it has held for
// recognition; 0 (no series) before, or in a phase without one.
func (e *exporter) recognised(t time.Time) float64 {
	i := e.phaseIndex(t)
	ph := &e.phases[i]
	if ph.Ceiling <= 0 || t.Sub(e.ends[i].Add(-ph.Duration)) < recognition {
		return 0
	}
	return ph.Ceiling
}

// balance is the burst bucket's balance at t (full at the start, each phase's Drain
// integrated and clamped to the bucket) and the drain a second at t.
func (e *exporter) balance(t time.Time) (balance, drain float64) {
	balance = e.volume.Bucket
	from := e.start
	for i, end := range e.ends {
		ph := &e.phases[i]
		to := end
		if t.Before(to) {
			to = t
		}
		balance = min(max(balance-ph.Drain*to.Sub(from).Seconds(), 0), e.volume.Bucket)
		if !t.After(end) || i == len(e.ends)-1 {
			return balance, ph.Drain
		}
		from = end
	}
	return balance, 0
}

// absent says whether series i of s has no sample at t: the skips until the first, the
// ceiling before one is recognised.
func (e *exporter) absent(s *series, i int, t time.Time) bool {
	switch {
	case i == s.skipped:
		return e.skipped == 0
	case s.ceiling > 0 && i == s.ceiling+1:
		return e.recognised(t) == 0
	}
	return false
}

// scrape appends what a scrape at t reads.
func (e *exporter) scrape(app storage.Appender, s *series, t time.Time, buf []float64) ([]float64, error) {
	e.advance(t)
	buf = e.values(t, buf)
	ms := t.UnixMilli()
	for i, l := range s.labels {
		if e.absent(s, i, t) {
			continue // the exporter's series appears at the first skip, a ceiling once recognised
		}
		ref, err := app.Append(s.refs[i], l, ms, buf[i])
		if err != nil {
			return buf, err
		}
		s.refs[i] = ref
	}
	return buf, nil
}
