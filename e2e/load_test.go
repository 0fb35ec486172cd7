package e2e

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

const (
	loadRate     = 200 // scrapes per second
	loadDuration = 30 * time.Second
	loadQuiet    = 10 * time.Second // the same targets without the load, to compare
	loadTargets  = 16
	// loadMaxOthers is how many CPUs other processes may keep busy for the timing to be
	// judged. At 200 scrapes/s the exporter needs about 0.7 CPU and the generator 0.13.
	// Judged and passed with others at 0.34 and 0.63 of 2 CPUs on average (scrape p99
	// 13 and 17 ms, no round off schedule), and with both CPUs taken for 5 s mid-load
	// (p99 17 ms). Before the scrape was made cheaper (1.0-1.2 CPU at this rate), others
	// at 0.18 already put 19 % of round intervals out of ±20 %.
	loadMaxOthers = 0.5
)

// TestScrapeLoadDoesNotDisturbProbes scrapes 16 busy targets (fsync and randread every
// second) 200 times a second for 30 s on loopback, gzip-compressed as Prometheus asks:
// scrape p99 must stay under 100 ms, nothing may fail but for rare overload shedding
// (503 from the in-flight limit), and the probe rounds must keep their schedule as they
// did in the quiet phase just before, side by side.
func TestScrapeLoadDoesNotDisturbProbes(t *testing.T) {
	names := targetNames("busy", loadTargets)
	// The targets share one RAM-backed ext4: this test judges what scrapes do to the
	// exporter's schedule, which a stall of the shared host disk (a journal commit behind
	// earlier tests' writeback) must not be mistaken for.
	_, mnt := testenv.RAMLoopExt4(t, 320<<20)
	dirs := mkdirsUnder(t, mnt, names...)
	cfg := "targets:\n"
	for _, name := range names {
		cfg += fmt.Sprintf(`  - name: %s
    path: %s
    fsync: {interval: 1s, ops: 5, block_size: 2300, file_size: 4MiB}
    randread: {interval: 1s, ops: 5, file_size: 4MiB}
    limits: {min_free: 0}
`, name, dirs[name])
	}
	e := testenv.StartExporter(t, testenv.WriteConfig(t, cfg))
	testenv.WaitMetric(t, e, 30*time.Second, "rounds on every busy target", func(f families) bool {
		for _, name := range names {
			if runs(f, name, "fsync") < 2 || runs(f, name, "randread") < 2 {
				return false
			}
		}
		return true
	})

	// Quiet phase, then load: the same watcher sees both.
	w := watch(e, 250*time.Millisecond, 5*time.Second)
	quietStart := time.Now()
	cpuQuiet := readCPU(e.Pid())
	time.Sleep(loadQuiet)
	loadStart := time.Now()
	cpuLoad := readCPU(e.Pid())
	res := scrapeLoad(e.Addr, loadRate, loadDuration)
	loadEnd := time.Now()
	cpuEnd := readCPU(e.Pid())
	obs := w.Stop()
	alive(t, e)
	exporterCPU := func(c cpuUse) float64 { return c.exporter }
	selfCPU := func(c cpuUse) float64 { return c.self }
	t.Logf("CPUs busy, quiet: exporter %.2f, others %.2f; load: exporter %.2f, load generator %.2f, others %.2f (of %d)",
		cores(cpuQuiet, cpuLoad, exporterCPU), othersCores(cpuQuiet, cpuLoad),
		cores(cpuLoad, cpuEnd, exporterCPU), cores(cpuLoad, cpuEnd, selfCPU), othersCores(cpuLoad, cpuEnd), runtime.NumCPU())

	p50, p99, worst := percentile(res.latencies, 0.5), percentile(res.latencies, 0.99), percentile(res.latencies, 1)
	t.Logf("load: %d scrapes in %s (%.0f/s, %d not sent because the client fell behind): p50 %s, p99 %s, max %s; %d shed with 503, %d failed",
		len(res.latencies), res.elapsed.Round(time.Millisecond), float64(len(res.latencies))/res.elapsed.Seconds(), res.dropped,
		fmtDur(p50), fmtDur(p99), fmtDur(worst), res.shed, len(res.failures))
	for _, f := range res.failures[:min(len(res.failures), 5)] {
		t.Errorf("scrape failed under load: %s", f)
	}
	quietObs, loadObs := between(obs, quietStart, loadStart), between(obs, loadStart, loadEnd)
	quiet := measureSchedule(quietObs, names, []string{"fsync", "randread"}, time.Second)
	loaded := measureSchedule(loadObs, names, []string{"fsync", "randread"}, time.Second)
	t.Logf("rounds, quiet: %s", quiet)
	t.Logf("rounds, load:  %s", loaded)
	last := loadObs[len(loadObs)-1].f
	reportLoadFigures(t, names, quietObs, loadObs)
	for _, name := range names {
		if n := errs(last, name, "fsync") + errs(last, name, "randread"); n != 0 {
			t.Errorf("%s: %.0f failed rounds", name, n)
		}
	}

	// Whether the figures hold is only a question when the exporter had the CPUs it
	// needs: other processes on a shared 2-CPU host can take them all.
	if others := othersCores(cpuLoad, cpuEnd); others > loadMaxOthers {
		t.Skipf("timing not judged: other processes kept %.2f CPUs busy during the load (limit %.2f)", others, loadMaxOthers)
	}
	// The load generator shares the CPUs too: whether it reached its rate is part of the
	// same question (seen: 179/s with others keeping 1.37 CPUs busy).
	if float64(len(res.latencies)) < 0.9*loadRate*loadDuration.Seconds() {
		t.Errorf("only %d scrapes in %s; the load was not %d/s", len(res.latencies), loadDuration, loadRate)
	}
	if float64(res.shed) > 0.01*float64(len(res.latencies)) {
		t.Errorf("%d of %d scrapes shed with 503", res.shed, len(res.latencies))
	}
	if p99 > 100*time.Millisecond {
		t.Errorf("scrape p99 %s under %d scrapes/s; want under 100ms", p99, loadRate)
	}
	if len(loaded.few) > 0 {
		t.Errorf("too few rounds measured under load on %v", loaded.few)
	}
	if loaded.share() > max(0.02, 2*quiet.share()) {
		t.Errorf("rounds lost their schedule under scrape load: %.1f%% of intervals outside ±20%% (quiet: %.1f%%)", 100*loaded.share(), 100*quiet.share())
	}
	if worst := percentile(loaded.gaps, 1); worst > 1500*time.Millisecond {
		t.Errorf("a round came %s after the previous one under load; interval 1s", worst.Round(time.Millisecond))
	}
	for _, name := range names {
		if n := skipped(last, name, "fsync", "inflight") + skipped(last, name, "randread", "inflight"); n != 0 {
			t.Errorf("%s: %.0f rounds skipped under scrape load", name, n)
		}
	}
}

// reportLoadFigures logs what the load did to the probes' figures themselves (reported,
// not asserted: it is the host's CPU and the Go runtime's syscall exit path, see DESIGN.md
// "Timing").
func reportLoadFigures(t *testing.T, names []string, quietObs, loadObs []observation) {
	t.Helper()
	for _, h := range []string{"diskprobe_fdatasync_duration_seconds", "diskprobe_read_duration_seconds"} {
		var q, l histogram
		for i, name := range names {
			qh := histogramOf(quietObs[len(quietObs)-1].f, h, name).sub(histogramOf(quietObs[0].f, h, name))
			lh := histogramOf(loadObs[len(loadObs)-1].f, h, name).sub(histogramOf(loadObs[0].f, h, name))
			if i == 0 {
				q, l = qh, lh
				continue
			}
			q, l = q.add(qh), l.add(lh)
		}
		t.Logf("%s p99: %.2fms quiet, %.2fms under load (%d, %d samples); slowest over %gms quiet, over %gms under load",
			h, q.quantile(0.99)*1000, l.quantile(0.99)*1000, q.count, l.count, q.slowest()*1000, l.slowest()*1000)
	}
}

type loadResult struct {
	latencies []time.Duration
	failures  []string
	shed      int // 503: over promhttp's in-flight limit
	dropped   int
	elapsed   time.Duration
}

// scrapeLoad fetches /metrics at rate per second for d from a pool of clients, with gzip
// as Prometheus asks for it, left compressed so the generator's own CPU competes with the
// exporter no more than it must.
func scrapeLoad(addr string, rate int, d time.Duration) loadResult {
	var (
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	jobs := make(chan struct{}, rate)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
				req.Header.Set("Accept-Encoding", "gzip")
				start := time.Now()
				resp, err := client.Do(req)
				code := 0
				if err == nil {
					var n int64
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
					if err == nil && code != http.StatusOK && code != http.StatusServiceUnavailable {
						err = fmt.Errorf("status %d, %d bytes", code, n)
					}
				}
				lat := time.Since(start)
				mu.Lock()
				res.latencies = append(res.latencies, lat)
				switch {
				case err != nil:
					res.failures = append(res.failures, err.Error())
				case code == http.StatusServiceUnavailable:
					res.shed++
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for time.Since(start) < d {
		<-tick.C
		select {
		case jobs <- struct{}{}:
		default:
			res.dropped++ // the client side cannot keep up: counted, not queued
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func targetNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// schedule sums up how the rounds of some probes on some targets kept their interval:
// the gaps between round ends, and the share of them outside the ±10 % jitter widened by
// 10 % of the interval (for the rounds' own duration and waits on the disk's other targets).
type schedule struct {
	gaps    []time.Duration
	outside int
	few     []string // targets with too few measured gaps
}

func measureSchedule(obs []observation, targets, probes []string, interval time.Duration) schedule {
	var s schedule
	lo, hi := time.Duration(0.8*float64(interval)), time.Duration(1.2*float64(interval))
	for _, target := range targets {
		for _, probe := range probes {
			gaps := roundGaps(obs, target, probe)
			if len(gaps) < 3 {
				s.few = append(s.few, target+"/"+probe)
			}
			for _, g := range gaps {
				if g < lo || g > hi {
					s.outside++
				}
			}
			s.gaps = append(s.gaps, gaps...)
		}
	}
	return s
}

func (s schedule) share() float64 { return float64(s.outside) / float64(max(1, len(s.gaps))) }

func (s schedule) String() string {
	return fmt.Sprintf("%d intervals: min %s, p50 %s, p99 %s, max %s; %.1f%% outside ±20%%",
		len(s.gaps), percentile(s.gaps, 0).Round(time.Millisecond), percentile(s.gaps, 0.5).Round(time.Millisecond),
		percentile(s.gaps, 0.99).Round(time.Millisecond), percentile(s.gaps, 1).Round(time.Millisecond), 100*s.share())
}
