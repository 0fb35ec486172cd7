package bench

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// A synthetic fleet whose every sample is a function of the series and the time, so that
// the same values are backfilled for the past and served live for the present: counters
// continue across the seam, windows that span it see one history.

type seriesKind int

const (
	kindBucket seriesKind = iota
	kindInfBucket
	kindSum
	kindCount
	kindCounter
	kindConstCounter // errors and skips: a healthy fleet's stay put
	kindGauge
	kindWave      // a gauge that moves (sequential throughput, temperature)
	kindTimestamp // *_timestamp_seconds: the time of the sample
	kindClock     // a counter of seconds: power-on time
)

// fleetSpec is one series of a target (or of a node, or of a disk's smartctl_exporter).
type fleetSpec struct {
	name   string
	labels []labels.Label // as exposed; target, device, model, serial, path are per target
	kind   seriesKind
	edge   float64 // kindBucket
	scale  float64 // latency of this histogram relative to fdatasync's
	value  float64 // gauges; per-second rate of counters
	fIdx   int     // index into the target's CDF tables (kindBucket)
}

const fleetSigma = 0.6

// fleetTarget holds what differs between targets.
type fleetTarget struct {
	median, rate, phase, wave float64
	fNormal, fSlow            []float64 // per bucket spec: share of operations at or under its edge
}

// ruleFleet is nodes × targets synthetic diskprobe targets and a smartctl_exporter per node.
type ruleFleet struct {
	nodes, perNode, clusteredNodes int
	base                           time.Time // counters are 0 here
	target, node, smart            []fleetSpec
	nBuckets                       int
	targets                        [][]fleetTarget // [node][target]
}

var fleetModels = []string{"SYNTH SSD A", "SYNTH SSD B", "SYNTH NVME C"}

func (fl *ruleFleet) instance(i int, port int) string { return fmt.Sprintf("node%05d:%d", i, port) }
func (fl *ruleFleet) cluster(i int) string {
	if i < fl.clusteredNodes {
		return fmt.Sprintf("c%04d", i/3)
	}
	return ""
}
func fleetDevice(k int) string          { return "sd" + string(rune('a'+k%26)) }
func fleetSerial(i, k int) string       { return fmt.Sprintf("SN%05d-%02d", i, k) }
func fleetModel(i int) string           { return fleetModels[(i/3)%len(fleetModels)] }
func fleetTargetName(k int) string      { return fmt.Sprintf("t%d", k) }
func unit(h uint64, shift uint) float64 { return float64((h>>shift)&0xffff) / 0x10000 }
func hash2(i, k int) uint64 {
	f := fnv.New64a()
	_, _ = fmt.Fprintf(f, "%d/%d", i, k) // a hash never fails to write
	return f.Sum64()
}

// newRuleFleet builds the fleet from the real exporter's series (tmpl): the per-target
// series with a target label, the per-node ones without.
func newRuleFleet(tmpl []*dto.MetricFamily, nodes, perNode, clusteredNodes int, base time.Time) *ruleFleet {
	fl := &ruleFleet{nodes: nodes, perNode: perNode, clusteredNodes: clusteredNodes, base: base}
	for _, f := range tmpl {
		name := f.GetName()
		scale := 1.0
		switch {
		case strings.Contains(name, "write"):
			scale = 0.3
		case strings.Contains(name, "read"):
			scale = 0.5
		}
		for _, m := range f.Metric {
			var ls []labels.Label
			perTarget := false
			for _, l := range m.Label {
				ls = append(ls, labels.Label{Name: l.GetName(), Value: l.GetValue()})
				if l.GetName() == "target" {
					perTarget = true
				}
			}
			add := func(s fleetSpec) {
				if perTarget {
					fl.target = append(fl.target, s)
				} else {
					fl.node = append(fl.node, s)
				}
			}
			switch {
			case m.Histogram != nil:
				for _, b := range m.Histogram.Bucket {
					if math.IsInf(b.GetUpperBound(), 1) {
						continue
					}
					add(fleetSpec{name: name + "_bucket", labels: append(append([]labels.Label(nil), ls...), labels.Label{Name: "le", Value: formatLe(b.GetUpperBound())}),
						kind: kindBucket, edge: b.GetUpperBound(), scale: scale, fIdx: fl.nBuckets})
					fl.nBuckets++
				}
				add(fleetSpec{name: name + "_bucket", labels: append(append([]labels.Label(nil), ls...), labels.Label{Name: "le", Value: "+Inf"}), kind: kindInfBucket})
				add(fleetSpec{name: name + "_sum", labels: ls, kind: kindSum, scale: scale})
				add(fleetSpec{name: name + "_count", labels: ls, kind: kindCount})
			case m.Counter != nil:
				s := fleetSpec{name: name, labels: ls, kind: kindCounter, value: m.Counter.GetValue()}
				switch {
				case strings.Contains(name, "error") || strings.Contains(name, "skipped"):
					s.kind = kindConstCounter
				case name == "diskprobe_probe_cpu_wait_seconds_total":
					s.value = 0.0001 // a few % of the fsync probe's time: no starved hosts
				case strings.HasSuffix(name, "_seconds_total"):
					s.value = 0.002
				default:
					s.value = 0.1
				}
				add(s)
			case strings.HasSuffix(name, "_timestamp_seconds"):
				add(fleetSpec{name: name, labels: ls, kind: kindTimestamp})
			case strings.Contains(name, "throughput"):
				add(fleetSpec{name: name, labels: ls, kind: kindWave, value: max(m.GetGauge().GetValue(), 100<<20)})
			default:
				v := m.GetGauge().GetValue()
				if m.Untyped != nil {
					v = m.Untyped.GetValue()
				}
				add(fleetSpec{name: name, labels: ls, kind: kindGauge, value: v})
			}
		}
	}
	// smartctl_exporter's series for one device (github.com/prometheus-community/
	// smartctl_exporter, metrics.go), as it serves them for a healthy SATA SSD.
	dev := []labels.Label{{Name: "device", Value: "sda"}}
	smart := func(name string, kind seriesKind, v float64, extra ...labels.Label) {
		fl.smart = append(fl.smart, fleetSpec{name: name, labels: append(append([]labels.Label(nil), dev...), extra...), kind: kind, value: v})
	}
	smart("smartctl_device", kindGauge, 1, labels.Label{Name: "interface", Value: "sat"}, labels.Label{Name: "protocol", Value: "ATA"},
		labels.Label{Name: "model_family", Value: "synthetic"}, labels.Label{Name: "model_name", Value: "model"},
		labels.Label{Name: "serial_number", Value: "serial"}, labels.Label{Name: "firmware_version", Value: "1.0"},
		labels.Label{Name: "ata_version", Value: "ACS-4"}, labels.Label{Name: "sata_version", Value: "SATA 3.3"})
	smart("smartctl_device_smart_status", kindGauge, 1)
	smart("smartctl_device_smartctl_exit_status", kindGauge, 0)
	smart("smartctl_device_media_errors", kindConstCounter, 0)
	smart("smartctl_device_critical_warning", kindGauge, 0)
	smart("smartctl_device_available_spare", kindGauge, 100)
	smart("smartctl_device_available_spare_threshold", kindGauge, 10)
	smart("smartctl_device_percentage_used", kindGauge, 3)
	smart("smartctl_device_num_err_log_entries", kindConstCounter, 0)
	smart("smartctl_device_temperature", kindWave, 38, labels.Label{Name: "temperature_type", Value: "current"})
	smart("smartctl_device_power_on_seconds", kindClock, 1)
	smart("smartctl_device_power_cycle_count", kindConstCounter, 42)
	smart("smartctl_device_bytes_read", kindCounter, 2e6)
	smart("smartctl_device_bytes_written", kindCounter, 4e6)
	smart("smartctl_device_status", kindGauge, 1)

	for i := range nodes {
		var ts []fleetTarget
		for k := range perNode {
			h := hash2(i, k)
			ft := fleetTarget{
				median: 0.0003 * math.Exp(float64((i/3*7+k)%11)/7), // 0.3-1.3 ms: a mostly healthy fleet
				rate:   20.0 / 15 * (0.8 + 0.4*unit(h, 0)),
				phase:  unit(h, 16) * slowPeriod,
				wave:   unit(h, 32) * 2 * math.Pi,
			}
			if i < clusteredNodes && (i/3)%7 == 0 && i%3 == 0 {
				ft.median *= 2.5 // one member in seven groups persistently slower
			}
			ft.fNormal = make([]float64, fl.nBuckets)
			ft.fSlow = make([]float64, fl.nBuckets)
			for _, s := range fl.target {
				if s.kind == kindBucket {
					ft.fNormal[s.fIdx] = lognormCDF(s.edge, ft.median*s.scale, fleetSigma)
					ft.fSlow[s.fIdx] = lognormCDF(s.edge, ft.median*s.scale*slowFactor, fleetSigma)
				}
			}
			ts = append(ts, ft)
		}
		fl.targets = append(fl.targets, ts)
	}
	return fl
}

// Every target has a slow spell of 2 % of every two hours (4x its median), at its own phase.
const (
	slowPeriod = 7200.0
	slowShare  = 0.02
	slowFactor = 4.0
)

// slowSeconds is the time spent in slow spells up to t seconds.
func slowSeconds(t, phase float64) float64 {
	x := t - phase
	if x <= 0 {
		return 0
	}
	n := math.Floor(x / slowPeriod)
	return n*slowPeriod*slowShare + min(x-n*slowPeriod, slowPeriod*slowShare)
}

// formatLe is how Prometheus 3 stores a bucket's le (normalised to OpenMetrics' float text),
// so that the backfill and the live scrape name the same series.
func formatLe(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func lognormCDF(x, median, sigma float64) float64 {
	if x <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-math.Log(x/median)/(sigma*math.Sqrt2))
}

// value is a series' value at time at, for target ft (nil for node and smartctl series)
// numbered k on its node.
func (fl *ruleFleet) value(s *fleetSpec, ft *fleetTarget, k int, at time.Time) float64 {
	t := at.Sub(fl.base).Seconds()
	switch s.kind {
	case kindBucket:
		slow := slowSeconds(t, ft.phase)
		return math.Floor(ft.rate * (t*ft.fNormal[s.fIdx] + slow*(ft.fSlow[s.fIdx]-ft.fNormal[s.fIdx])))
	case kindInfBucket, kindCount:
		return math.Floor(ft.rate * t)
	case kindSum:
		slow := slowSeconds(t, ft.phase)
		return ft.rate * ft.median * s.scale * math.Exp(fleetSigma*fleetSigma/2) * (t + (slowFactor-1)*slow)
	case kindCounter:
		return s.value * (1 + float64(k%5)) * t
	case kindConstCounter:
		return s.value
	case kindTimestamp:
		return float64(at.UnixMilli()) / 1000
	case kindClock:
		return t + 3e7
	case kindWave:
		ph := 0.0
		if ft != nil {
			ph = ft.wave
		}
		return s.value * (1 + 0.1*math.Sin(t/600+ph))
	}
	return s.value * (1 + 0.01*float64(k%7))
}

// labelsOf is a spec's exposed labels with the per-target values of target k on node i.
func (fl *ruleFleet) labelsOf(s *fleetSpec, i, k int) []labels.Label {
	out := make([]labels.Label, len(s.labels))
	for j, l := range s.labels {
		switch l.Name {
		case "target":
			l.Value = fleetTargetName(k)
		case "device":
			l.Value = fleetDevice(k)
		case "model", "model_name":
			l.Value = fleetModel(i)
		case "serial", "serial_number":
			l.Value = fleetSerial(i, k)
		case "path":
			l.Value = "/var/lib/diskprobe/" + fleetTargetName(k)
		}
		out[j] = l
	}
	return out
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// ServeHTTP serves /node/<i> (the exporter) and /smart/<i> (smartctl_exporter) at the time
// of the request.
func (fl *ruleFleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	smart := strings.HasPrefix(r.URL.Path, "/smart/")
	i, err := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/smart/"), "/node/"))
	if err != nil || i < 0 || i >= fl.nodes {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	bw := bufio.NewWriterSize(w, 64<<10)
	// bufio's error is sticky: a scraper gone away shows in Flush, and nothing is to be done then.
	defer func() { _ = bw.Flush() }()
	var buf []byte
	line := func(name string, ls []labels.Label, v float64) {
		buf = append(buf[:0], name...)
		buf = append(buf, '{')
		for j, l := range ls {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, l.Name...)
			buf = append(buf, '=', '"')
			buf = append(buf, labelEscaper.Replace(l.Value)...)
			buf = append(buf, '"')
		}
		buf = append(buf, '}', ' ')
		buf = strconv.AppendFloat(buf, v, 'g', -1, 64)
		buf = append(buf, '\n')
		_, _ = bw.Write(buf) // sticky: Flush reports it
	}
	if smart {
		for k := range fl.perNode {
			for j := range fl.smart {
				s := &fl.smart[j]
				line(s.name, fl.labelsOf(s, i, k), fl.value(s, nil, k, now))
			}
		}
		return
	}
	for j := range fl.node {
		s := &fl.node[j]
		line(s.name, s.labels, fl.value(s, nil, 0, now))
	}
	for k := range fl.perNode {
		ft := &fl.targets[i][k]
		for j := range fl.target {
			s := &fl.target[j]
			line(s.name, fl.labelsOf(s, i, k), fl.value(s, ft, k, now))
		}
	}
}

// scrapeConfigs are the two jobs that scrape the fleet at addr.
func (fl *ruleFleet) scrapeConfigs(addr string) string {
	var sc strings.Builder
	sc.WriteString("  - job_name: diskprobe\n    static_configs:\n")
	for i := range fl.nodes {
		cl := ""
		if c := fl.cluster(i); c != "" {
			cl = fmt.Sprintf(", cluster: %q", c)
		}
		fmt.Fprintf(&sc, "      - targets: [%q]\n        labels: {__metrics_path__: \"/node/%d\", instance: %q%s}\n", addr, i, fl.instance(i, 9934), cl)
	}
	sc.WriteString("  - job_name: smartctl\n    static_configs:\n")
	for i := range fl.nodes {
		fmt.Fprintf(&sc, "      - targets: [%q]\n        labels: {__metrics_path__: \"/smart/%d\", instance: %q}\n", addr, i, fl.instance(i, 9633))
	}
	return sc.String()
}

// fullLabels is a series as Prometheus stores it from the scrape.
func fullLabels(name, job, instance, cluster string, ls []labels.Label) labels.Labels {
	b := labels.NewScratchBuilder(len(ls) + 4)
	b.Add("__name__", name)
	b.Add("job", job)
	b.Add("instance", instance)
	if cluster != "" {
		// Both: today's rules take a group's members by peer_group, those before issue 47 by
		// cluster, and the cost is compared side by side on one fleet.
		b.Add("cluster", cluster)
		b.Add("peer_group", cluster)
	}
	for _, l := range ls {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}

// backfillStats says what a backfill wrote.
type backfillStats struct {
	Series, Samples int64
	Recorded        int64 // series of recording rules among them
	Took            time.Duration
	MinTime         time.Time
}

// recordedSeries is one series of a recording rule as a discovery run saw it.
type recordedSeries struct {
	Labels labels.Labels
	Value  float64
	Every  time.Duration // its group's own interval; 0: the evaluation interval
}

// backfill writes one TSDB block into dir: every series of the fleet, and the recorded
// series given, with samples wherever a rule's window reads them (historyIntervals) up to t0:
// scrapes every scrape interval, recorded series every evaluation interval (or their group's
// own, when it is longer: a 5-minute group's day is 288 samples, as live).
func (fl *ruleFleet) backfill(ctx context.Context, dir string, windows []ruleWindow, recorded []recordedSeries, t0 time.Time, scrape, eval, measure time.Duration) (*backfillStats, error) {
	start := time.Now()
	byName := windowsByName(windows)
	// One block over everything written (its start is the oldest window's): one block is
	// not compacted again while the benchmark runs.
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, 60*24*time.Hour.Milliseconds())
	if err != nil {
		return nil, err
	}
	defer w.Close()
	st := &backfillStats{MinTime: t0}
	var mu sync.Mutex
	step := scrape.Milliseconds()
	t0ms := t0.UnixMilli() / step * step
	write := func(app storage.Appender, ls labels.Labels, stepMs int64, val func(at time.Time) float64) (int64, error) {
		var n int64
		var ref storage.SeriesRef
		for _, iv := range historyIntervals(ls, byName[ls.Get("__name__")], time.UnixMilli(t0ms), measure, 10*time.Minute) {
			from := (iv.From + stepMs - 1) / stepMs * stepMs
			for ts := from; ts <= iv.To; ts += stepMs {
				var err error
				if ref, err = app.Append(ref, ls, ts, val(time.UnixMilli(ts))); err != nil {
					return n, fmt.Errorf("%s at %d: %w", ls, ts, err)
				}
				n++
			}
			if tm := time.UnixMilli(from); tm.Before(st.MinTime) {
				mu.Lock()
				if tm.Before(st.MinTime) {
					st.MinTime = tm
				}
				mu.Unlock()
			}
		}
		return n, nil
	}
	workers := 2
	errs := make(chan error, workers)
	var samples, series int64
	for wk := range workers {
		go func() {
			errs <- func() error {
				app := w.Appender(ctx)
				var n, s int64
				emit := func(ls labels.Labels, stepMs int64, val func(time.Time) float64) error {
					c, err := write(app, ls, stepMs, val)
					n += c
					s++
					return err
				}
				for i := wk; i < fl.nodes; i += workers {
					inst, sinst, cl := fl.instance(i, 9934), fl.instance(i, 9633), fl.cluster(i)
					if err := emit(fullLabels("up", "diskprobe", inst, cl, nil), step, func(time.Time) float64 { return 1 }); err != nil {
						return err
					}
					if err := emit(fullLabels("up", "smartctl", sinst, "", nil), step, func(time.Time) float64 { return 1 }); err != nil {
						return err
					}
					for j := range fl.node {
						sp := &fl.node[j]
						if err := emit(fullLabels(sp.name, "diskprobe", inst, cl, sp.labels), step, func(at time.Time) float64 { return fl.value(sp, nil, 0, at) }); err != nil {
							return err
						}
					}
					for k := range fl.perNode {
						ft := &fl.targets[i][k]
						for j := range fl.target {
							sp := &fl.target[j]
							if err := emit(fullLabels(sp.name, "diskprobe", inst, cl, fl.labelsOf(sp, i, k)), step, func(at time.Time) float64 { return fl.value(sp, ft, k, at) }); err != nil {
								return err
							}
						}
						for j := range fl.smart {
							sp := &fl.smart[j]
							if err := emit(fullLabels(sp.name, "smartctl", sinst, "", fl.labelsOf(sp, i, k)), step, func(at time.Time) float64 { return fl.value(sp, nil, k, at) }); err != nil {
								return err
							}
						}
					}
					if i%(50*workers) == wk {
						if err := app.Commit(); err != nil {
							return err
						}
						app = w.Appender(ctx)
					}
				}
				if wk == 0 {
					// The recorded series: a slow wave around what the discovery run saw.
					for ri, r := range recorded {
						ph := float64(ri%97) / 97 * 2 * math.Pi
						v := r.Value
						if err := emit(r.Labels, max(eval, r.Every).Milliseconds(), func(at time.Time) float64 {
							return v * (1 + 0.02*math.Sin(float64(at.Unix())/900+ph))
						}); err != nil {
							return err
						}
					}
				}
				mu.Lock()
				samples += n
				series += s
				mu.Unlock()
				return app.Commit()
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	if _, err := w.Flush(ctx); err != nil {
		return nil, err
	}
	st.Series, st.Samples, st.Recorded, st.Took = series, samples, int64(len(recorded)), time.Since(start)
	return st, nil
}
