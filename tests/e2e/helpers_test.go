// Package e2e runs the real exporter binary through what goes wrong in the field, and
// checks what it does then: frozen, hung, slow, throttled, full, vanishing, mounted-over or
// foreign storage, a starved CPU, missing privileges, kills and crashes, bad reloads, heavy
// scrape load and hostile clients. What the exporter promises when nothing goes wrong is
// package integration's. Most tests need root and a real kernel (internal/testenv); they
// skip with a reason otherwise.
package e2e

import (
	"github.com/diskprobe/diskprobe_exporter/internal/latency"

	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// families is one parsed scrape.
type families = map[string]*dto.MetricFamily

func value(f families, name string, labels ...string) float64 {
	v, _ := framework.Value(f, name, labelMap(labels))
	return v
}

func labelMap(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// runs, errs, skipped and lastSuccess read the per-probe counters of the contract.
func runs(f families, target, probe string) float64 {
	return value(f, "diskprobe_probe_runs_total", "target", target, "probe", probe)
}

func errs(f families, target, probe string) float64 {
	return value(f, "diskprobe_probe_errors_total", "target", target, "probe", probe)
}

func skipped(f families, target, probe, reason string) float64 {
	return value(f, "diskprobe_probe_skipped_total", "target", target, "probe", probe, "reason", reason)
}

func lastSuccess(f families, target, probe string) float64 {
	return value(f, "diskprobe_probe_last_success_timestamp_seconds", "target", target, "probe", probe)
}

func inflight(f families, target, probe string) float64 {
	return value(f, "diskprobe_probe_inflight_seconds", "target", target, "probe", probe)
}

// histogram is the classic buckets of one histogram series: upper bound → cumulative count.
type histogram struct {
	count   uint64
	sum     float64 // seconds
	buckets map[float64]uint64
}

func histogramOf(f families, name, target string) histogram {
	h := histogram{buckets: map[float64]uint64{}}
	fam, ok := f[name]
	if !ok {
		return h
	}
	for _, m := range fam.GetMetric() {
		match := false
		for _, l := range m.GetLabel() {
			if l.GetName() == "target" && l.GetValue() == target {
				match = true
			}
		}
		if !match || m.GetHistogram() == nil {
			continue
		}
		h.count = m.GetHistogram().GetSampleCount()
		h.sum = m.GetHistogram().GetSampleSum()
		for _, b := range m.GetHistogram().GetBucket() {
			h.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
	}
	return h
}

// sub is the samples observed between two scrapes.
func (h histogram) sub(earlier histogram) histogram {
	d := histogram{count: h.count - earlier.count, sum: h.sum - earlier.sum, buckets: map[float64]uint64{}}
	for le, c := range h.buckets {
		d.buckets[le] = c - earlier.buckets[le]
	}
	return d
}

// slowest is the least time the slowest sample took: the lower edge of the highest
// classic bucket with samples in it (0 when there are none).
func (h histogram) slowest() float64 {
	les := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	lower, prevLE, prevCount := 0.0, 0.0, uint64(0)
	for _, le := range les {
		if h.buckets[le] > prevCount {
			lower = prevLE
		}
		prevLE, prevCount = le, h.buckets[le]
	}
	if h.count > prevCount { // samples above the highest edge
		lower = prevLE
	}
	return lower
}

// quantile estimates a quantile from the classic buckets the way PromQL's
// histogram_quantile does (linear interpolation inside the bucket).
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	les := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	rank := q * float64(h.count)
	prevLE, prevCount := 0.0, 0.0
	for _, le := range les {
		c := float64(h.buckets[le])
		if c >= rank {
			if c == prevCount {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevCount)/(c-prevCount)
		}
		prevLE, prevCount = le, c
	}
	return math.Inf(1)
}

// observation is one scrape taken by a watcher.
type observation struct {
	at      time.Time
	latency time.Duration
	err     error
	f       families
}

// watcher scrapes an exporter at a fixed period in the background and keeps every result,
// so a test can look at what an operator's Prometheus would have seen all along.
type watcher struct {
	mu   sync.Mutex
	obs  []observation
	stop chan struct{}
	done chan struct{}
}

func watch(e *framework.Exporter, period, timeout time.Duration) *watcher {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			at := time.Now()
			f, lat, err := e.Scrape(timeout)
			w.mu.Lock()
			w.obs = append(w.obs, observation{at: at, latency: lat, err: err, f: f})
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Stop ends the watcher and returns everything it saw.
func (w *watcher) Stop() []observation {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]observation(nil), w.obs...)
}

// between are the observations taken in [from, to).
func between(obs []observation, from, to time.Time) []observation {
	var out []observation
	for _, o := range obs {
		if !o.at.Before(from) && o.at.Before(to) {
			out = append(out, o)
		}
	}
	return out
}

// logLines are the lines of the exporter's log that contain every one of parts.
func logLines(e *framework.Exporter, parts ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(e.Log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, p := range parts {
			if !strings.Contains(sc.Text(), p) {
				continue next
			}
		}
		out = append(out, sc.Text())
	}
	return out
}

// alive fails the test when the exporter process has exited.
func alive(t *testing.T, e *framework.Exporter) {
	t.Helper()
	select {
	case <-e.Done():
		t.Fatalf("the exporter exited: %v", e.Cmd.ProcessState)
	default:
	}
}

// mkdirs makes a fresh directory per name under a temporary directory.
func mkdirs(t *testing.T, names ...string) map[string]string {
	t.Helper()
	return mkdirsUnder(t, t.TempDir(), names...)
}

// mkdirsUnder makes one directory per name under base.
func mkdirsUnder(t *testing.T, base string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		p := filepath.Join(base, n)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		out[n] = p
	}
	return out
}

// probeHeader reads the first line block of a probe file the way an operator would: the
// text header our files start with.
func probeHeader(t *testing.T, path string) string {
	t.Helper()
	b := make([]byte, 4096)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Read(b)
	return strings.TrimRight(string(b[:n]), "\x00")
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * int64(s.Bsize)
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// roundGaps are the times between consecutive ends of a probe's rounds on a target, from
// diskprobe_probe_last_success_timestamp_seconds, using only pairs of scrapes between
// which exactly one round ended (so a missed scrape never reads as a late round).
func roundGaps(obs []observation, target, probe string) []time.Duration {
	var gaps []time.Duration
	var prevRuns, prevLast float64
	have := false
	for _, o := range obs {
		if o.err != nil {
			continue
		}
		r, l := runs(o.f, target, probe), lastSuccess(o.f, target, probe)
		if have && r != prevRuns && l <= prevLast {
			// A failed round, or a scrape between the two updates of a success: keep the
			// last consistent pair, or the next gap would span two rounds.
			continue
		}
		if have && r == prevRuns+1 && l > prevLast && prevLast > 0 {
			gaps = append(gaps, time.Duration((l-prevLast)*1e9))
		}
		if !have || r != prevRuns {
			prevRuns, prevLast, have = r, l, true
		}
	}
	return gaps
}

// percentile of durations (p in 0..1), nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	return latency.Percentile(latency.Sorted(ds), 100*p)
}

// add sums two histograms with the same buckets.
func (h histogram) add(o histogram) histogram {
	s := histogram{count: h.count + o.count, buckets: map[float64]uint64{}}
	for le, c := range h.buckets {
		s.buckets[le] = c + o.buckets[le]
	}
	return s
}

// cpuUse is a reading of CPU time in clock ticks (1/100 s): the whole host's busy time,
// the exporter's and this test process's.
type cpuUse struct {
	at                   time.Time
	host, exporter, self float64
}

func readCPU(pid int) cpuUse {
	u := cpuUse{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		for i, v := range f[1:] {
			if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
				continue
			}
			x, _ := strconv.ParseFloat(v, 64)
			u.host += x
		}
	}
	procTicks := func(path string) float64 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		return ut + st
	}
	u.exporter = procTicks(fmt.Sprintf("/proc/%d/stat", pid))
	u.self = procTicks("/proc/self/stat")
	return u
}

// othersCores is how many CPUs other processes kept busy on average between two readings:
// what a timing figure taken meanwhile competed with.
func othersCores(a, b cpuUse) float64 {
	ticks := (b.host - a.host) - (b.exporter - a.exporter) - (b.self - a.self)
	return ticks / 100 / b.at.Sub(a.at).Seconds()
}

func cores(a, b cpuUse, of func(cpuUse) float64) float64 {
	return (of(b) - of(a)) / 100 / b.at.Sub(a.at).Seconds()
}
