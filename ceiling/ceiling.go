// Package ceiling recognises, from a device's own counters (/proc/diskstats: everyone's
// I/O, the prober's included) and the prober's latency, that the device is held at a
// ceiling: a provider's provisioned IOPS or throughput, or a blkio throttle. It also
// keeps the burst-credit estimate of a volume that was sold with a bucket (credit.go).
// It imports neither Prometheus nor the collector: the collector feeds it and publishes
// what it says.
//
// The rule, and why (docs/design.md says it for operators):
//
//   - The counters are cut into windows of at least Thresholds.Window. A window is
//     saturated when work waited in it: the device's own queue held one request or more
//     on average (Little's law on field 11), or, by Little's law on the prober's own
//     latency, the device's rate times that latency is one or more AND that latency is
//     many times the device's own time per request of its slowest kind (read, write,
//     flush), which is how a wait above the device shows (a blkio throttle holds bios
//     before the device, so its queue never rises). A device busy but not held back
//     serves the prober about as fast as it serves anyone: it fails the second half.
//   - A window has demand when the device completed many times what the prober itself
//     did in it: the prober's trickle on a slow device is not a ceiling.
//   - A level is recognised when, for at least Thresholds.Recognise, every window was
//     saturated with demand and the rate (per direction, IOPS and bytes/s apart) was flat:
//     most windows within ±Flat of their median; AND no window of the last
//     Thresholds.PeakHorizon completed more than Exceed times it (for a level at a
//     volume's stated baseline, more than Exceed times its stated burst: Expect). A cap is
//     a ceiling never exceeded; a failing device's throughput wanders and falls as its
//     latency rises, so it is neither flat nor under its own recent peak.
//   - Once recognised, a level stands until a window completes more than Exceed times
//     it (each series apart: a cap on IOPS stands when the block size, and so the
//     bytes/s, changes). The device is at its ceiling while windows are saturated at ≥ (1−Flat)
//     of the level: it enters after EnterWindows such windows, and leaves after
//     ExitWindows that are not, so that the flag does not flicker.
package ceiling

import (
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// Series are the rates a ceiling can be recognised on: IOPS and bytes/s, each for reads,
// writes and both.
type Series int

// The series, by unit and direction.
const (
	ReadIOPS Series = iota
	WriteIOPS
	TotalIOPS
	ReadBytes
	WriteBytes
	TotalBytes
	nSeries
)

// Direction is the series' direction label: read, write or total.
func (s Series) Direction() string { return [...]string{"read", "write", "total"}[s%3] }

// Bytes is whether the series is in bytes/s (else IOPS).
func (s Series) Bytes() bool { return s >= ReadBytes }

// AllSeries lists every series, in order.
var AllSeries = [nSeries]Series{ReadIOPS, WriteIOPS, TotalIOPS, ReadBytes, WriteBytes, TotalBytes}

// Thresholds are the recogniser's constants. DefaultThresholds are the daemon's.
type Thresholds struct {
	Window       time.Duration // a window's least length
	Recognise    time.Duration // how long saturated windows must be flat before a level is named
	MinWindows   int           // and at least this many of them
	Flat         float64       // ±share of the median a flat window's rate is within
	FlatShare    float64       // the share of windows that must be within it
	Exceed       float64       // a rate above this times the level contradicts it
	PeakHorizon  time.Duration // how far back "never exceeded" looks
	Queue        float64       // average requests in flight (device queue, or Little's law on our latency) that count as waiting
	AboveDevice  float64       // our latency over the device's own time per request that says we waited above it
	Demand       float64       // the device's completions over the prober's own that count as real demand
	EnterWindows int           // consecutive binding windows to be back at a recognised ceiling
	ExitWindows  int           // consecutive windows that do not bind to leave it
}

// DefaultThresholds are the daemon's: windows of 10 s (a default target's units come
// every ~7.5 s), named after 2 minutes flat, ±10 %, never above 1.1× in 15 minutes.
var DefaultThresholds = Thresholds{
	Window:       10 * time.Second,
	Recognise:    2 * time.Minute,
	MinWindows:   6,
	Flat:         0.10,
	FlatShare:    0.8,
	Exceed:       1.1,
	PeakHorizon:  15 * time.Minute,
	Queue:        1,
	AboveDevice:  10,
	Demand:       10,
	EnterWindows: 2,
	ExitWindows:  3,
}

// ringSize bounds the windows kept: Recognise at the shortest Window, with room.
const ringSize = 16

// peakSlots is how many slots of PeakHorizon/peakSlots the recent peak is kept in.
const peakSlots = 15

// window is one closed window of the device's counters.
type window struct {
	end       time.Time
	length    time.Duration
	rate      [nSeries]float64
	saturated bool // work waited, with real demand
}

// State is what is recognised now.
type State struct {
	Ceiling   [nSeries]float64 // by series; 0 where no level is recognised
	Since     time.Time        // when the present ceiling was first recognised; zero when none
	AtCeiling bool             // the device sits at it with work waiting
	Known     bool             // at least one window has closed: the device has context
}

// Recognised reports whether any ceiling is recognised.
func (s State) Recognised() bool { return !s.Since.IsZero() }

// Recogniser recognises one device's ceiling, for one target. Its methods are called by
// one goroutine (the target's I/O worker) and do not allocate.
type Recogniser struct {
	th Thresholds

	started  bool
	winStart time.Time
	atStart  device.Stats
	ownOps   float64       // the prober's operations in the open window
	ownBytes float64       // and their bytes
	ownIO    time.Duration // time inside the small-block ones, for their latency
	ownIOOps float64       // how many those were

	ring  [ringSize]window // the last windows, ring[head-1] the newest
	head  int
	count int

	peak     [peakSlots][nSeries]float64 // the highest window rate per slot of PeakHorizon
	peakSlot [peakSlots]int64            // which slot (time / slot length) each holds

	// A volume's stated tiers, by series (0: none): a level at base is recognised even
	// though the device recently did up to burst, which an emptied bucket explains.
	base, burst [nSeries]float64

	state       State
	hits, miss  int               // consecutive binding / non-binding windows at the ceiling
	scratch     [ringSize]float64 // for medians
	lastWindow  window            // the newest, for Last
	ownRateLast [2]float64        // ops/s and bytes/s the prober did in it
	_           [0]func()         // not comparable
}

// New returns a recogniser with thresholds th.
func New(th Thresholds) *Recogniser { return &Recogniser{th: th} }

// Expect tells the recogniser a volume's stated tiers on series s: it bursts to burst
// from a bucket and falls back to baseline when the bucket is empty. A level at the
// baseline is then named even within PeakHorizon of the burst; without this, a gp2
// volume whose credits ran out would be called capped only 15 minutes later.
func (r *Recogniser) Expect(s Series, baseline, burst float64) {
	r.base[s], r.burst[s] = baseline, burst
}

// Own adds what a round of the prober did on the device: ops operations moving bytes.
// small says its operations are small (a 4 KiB read, a write and its fdatasync), so
// that their mean time inside the system calls, io/ops, is a latency comparable with
// any other request's; a 1 MiB sequential read's is not, nor a file preparation step's.
func (r *Recogniser) Own(ops int, bytes int64, io time.Duration, small bool) {
	r.ownOps += float64(ops)
	r.ownBytes += float64(bytes)
	if small && ops > 0 {
		r.ownIO += io
		r.ownIOOps += float64(ops)
	}
}

// Observe takes the device's counters read at now, closes the open window when it is
// long enough, and reports whether it did (State may have changed).
func (r *Recogniser) Observe(now time.Time, s device.Stats) bool {
	if !r.started || !s.After(r.atStart) || now.Before(r.winStart) {
		// First read, or the device was re-created: start again from here.
		r.open(now, s)
		r.started = true
		return false
	}
	length := now.Sub(r.winStart)
	if length < r.th.Window {
		return false
	}
	w := r.measure(now, length, s.Sub(r.atStart))
	r.open(now, s)
	r.push(w)
	r.judge(w)
	r.state.Known = true
	return true
}

func (r *Recogniser) open(now time.Time, s device.Stats) {
	r.winStart, r.atStart = now, s
	r.ownOps, r.ownBytes, r.ownIO, r.ownIOOps = 0, 0, 0, 0
}

// measure turns a window's counter differences into rates and says whether work waited.
func (r *Recogniser) measure(now time.Time, length time.Duration, d device.Stats) window {
	sec := length.Seconds()
	w := window{end: now, length: length}
	w.rate[ReadIOPS] = float64(d.ReadIOs) / sec
	w.rate[WriteIOPS] = float64(d.WriteIOs) / sec
	w.rate[TotalIOPS] = float64(d.ReadIOs+d.WriteIOs+d.DiscardIOs) / sec
	w.rate[ReadBytes] = float64(d.ReadSectors) * 512 / sec
	w.rate[WriteBytes] = float64(d.WriteSectors) * 512 / sec
	w.rate[TotalBytes] = w.rate[ReadBytes] + w.rate[WriteBytes]
	requests := float64(d.ReadIOs + d.WriteIOs + d.DiscardIOs + d.FlushIOs)
	r.ownRateLast = [2]float64{r.ownOps / sec, r.ownBytes / sec}

	waited := d.QueueTime.Seconds()/sec >= r.th.Queue
	if !waited && r.ownIOOps > 0 && requests > 0 {
		latency := r.ownIO.Seconds() / r.ownIOOps
		waited = requests/sec*latency >= r.th.Queue && latency >= r.th.AboveDevice*slowestKind(d)
	}
	demand := float64(d.ReadIOs+d.WriteIOs+d.DiscardIOs) >= r.th.Demand*max(r.ownOps, 1)
	w.saturated = waited && demand
	r.lastWindow = w
	return w
}

// slowestKind is the device's own mean time per request of its slowest kind (read,
// write, discard, flush) in a window: a probe operation is a few requests (a write, the
// journal's, a flush), each no slower than that, so its latency many times over it was
// spent waiting somewhere else.
func slowestKind(d device.Stats) float64 {
	slowest := 0.0
	for _, k := range [...]struct {
		n uint64
		t time.Duration
	}{{d.ReadIOs, d.ReadTime}, {d.WriteIOs, d.WriteTime}, {d.DiscardIOs, d.DiscardTime}, {d.FlushIOs, d.FlushTime}} {
		if k.n > 0 {
			slowest = max(slowest, k.t.Seconds()/float64(k.n))
		}
	}
	return slowest
}

func (r *Recogniser) push(w window) {
	r.ring[r.head] = w
	r.head = (r.head + 1) % ringSize
	r.count = min(r.count+1, ringSize)
	slotLen := r.th.PeakHorizon / peakSlots
	slot := w.end.UnixNano() / int64(slotLen)
	i := int(slot % peakSlots)
	if r.peakSlot[i] != slot {
		r.peakSlot[i] = slot
		r.peak[i] = [nSeries]float64{}
	}
	for s := range nSeries {
		r.peak[i][s] = max(r.peak[i][s], w.rate[s])
	}
}

// recentPeak is the highest rate of series s in the windows of the last PeakHorizon.
func (r *Recogniser) recentPeak(s Series, now time.Time) float64 {
	slotLen := int64(r.th.PeakHorizon / peakSlots)
	newest := now.UnixNano() / slotLen
	p := 0.0
	for i := range peakSlots {
		if newest-r.peakSlot[i] < peakSlots {
			p = max(p, r.peak[i][s])
		}
	}
	return p
}

// judge updates the state with a window just closed.
func (r *Recogniser) judge(w window) {
	st := &r.state
	if st.Recognised() {
		left := false
		for s := range nSeries {
			if c := st.Ceiling[s]; c > 0 && w.rate[s] > r.th.Exceed*c {
				st.Ceiling[s] = 0 // contradicted: the device did more than the level
			}
			left = left || st.Ceiling[s] > 0
		}
		if !left {
			*st = State{Known: true}
			r.hits, r.miss = 0, 0
		}
	}
	if level, ok := r.recognise(w.end); ok {
		if !st.Recognised() || !sameLevel(st.Ceiling, level, r.th.Flat) {
			st.Ceiling, st.Since = level, w.end
		}
		st.AtCeiling, r.hits, r.miss = true, r.th.EnterWindows, 0
		return
	}
	if !st.Recognised() {
		return
	}
	if r.binds(w) {
		r.hits, r.miss = r.hits+1, 0
		if r.hits >= r.th.EnterWindows {
			st.AtCeiling = true
		}
		return
	}
	r.hits, r.miss = 0, r.miss+1
	if r.miss >= r.th.ExitWindows {
		st.AtCeiling = false
	}
}

// binds is whether a window is saturated at the recognised level of some series.
func (r *Recogniser) binds(w window) bool {
	if !w.saturated {
		return false
	}
	for s := range nSeries {
		if c := r.state.Ceiling[s]; c > 0 && w.rate[s] >= (1-r.th.Flat)*c {
			return true
		}
	}
	return false
}

// recognise looks for a level: the newest run of saturated windows, at least Recognise
// long, flat in some series and never exceeded in the last PeakHorizon.
func (r *Recogniser) recognise(now time.Time) (level [nSeries]float64, ok bool) {
	n := 0
	var span time.Duration
	for n < r.count {
		w := &r.ring[(r.head-1-n+ringSize)%ringSize]
		if !w.saturated {
			break
		}
		span += w.length
		n++
		if span >= r.th.Recognise && n >= r.th.MinWindows {
			break
		}
	}
	if span < r.th.Recognise || n < r.th.MinWindows {
		return level, false
	}
	for s := range nSeries {
		vals := r.scratch[:n]
		for i := range n {
			vals[i] = r.ring[(r.head-1-i+ringSize)%ringSize].rate[s]
		}
		med := median(vals)
		if med <= 0 {
			continue
		}
		within := 0
		for _, v := range vals {
			if v >= (1-r.th.Flat)*med && v <= (1+r.th.Flat)*med {
				within++
			}
		}
		if float64(within) < r.th.FlatShare*float64(n) || !r.neverExceeded(Series(s), med, now) {
			continue
		}
		// The prober's own rate is no ceiling: a level must be well above it.
		own := r.ownRateLast[0]
		if Series(s).Bytes() {
			own = r.ownRateLast[1]
		}
		if med < r.th.Demand*own {
			continue
		}
		level[s], ok = med, true
	}
	return level, ok
}

// neverExceeded is whether no window of the last PeakHorizon did more than Exceed times
// level on series s, or, for a level at a stated baseline, more than Exceed times the
// stated burst.
func (r *Recogniser) neverExceeded(s Series, level float64, now time.Time) bool {
	peak := r.recentPeak(s, now)
	if peak <= r.th.Exceed*level {
		return true
	}
	base := r.base[s]
	return r.burst[s] > 0 && level >= (1-r.th.Flat)*base && level <= (1+r.th.Flat)*base && peak <= r.th.Exceed*r.burst[s]
}

// sameLevel is whether two sets of levels name the same ceiling: the same series, each
// within ±flat.
func sameLevel(a, b [nSeries]float64, flat float64) bool {
	for s := range nSeries {
		if (a[s] > 0) != (b[s] > 0) || (a[s] > 0 && (b[s] < (1-flat)*a[s] || b[s] > (1+flat)*a[s])) {
			return false
		}
	}
	return true
}

// median sorts vals in place (insertion sort: at most ringSize values) and returns
// their median.
func median(vals []float64) float64 {
	for i := 1; i < len(vals); i++ {
		for j := i; j > 0 && vals[j] < vals[j-1]; j-- {
			vals[j], vals[j-1] = vals[j-1], vals[j]
		}
	}
	n := len(vals)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}

// State is what is recognised now.
func (r *Recogniser) State() State { return r.state }

// Last is the newest window: its rates (by series), its length, and whether work waited
// in it with real demand; zero before one closed.
func (r *Recogniser) Last() (rate [nSeries]float64, length time.Duration, saturated bool) {
	return r.lastWindow.rate, r.lastWindow.length, r.lastWindow.saturated
}
