// Package integration runs the real exporter binary (internal/testenv) on real, healthy
// targets: temporary directories, loop devices, loop-mounted ext4 and btrfs, partitions and
// tmpfs. It checks what the exporter promises from the outside when nothing goes wrong:
// metrics, device context, rate limits held as measured by the kernel's own counters,
// probe_dir placement, cleanup, the HTTP endpoints and web config, the command line and
// the configuration checks. What the exporter does when something goes wrong is package
// e2e's.
package integration

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

const mib = 1 << 20

type families = map[string]*dto.MetricFamily

// metric is the value of the sample of name with the given label pairs, 0 if absent.
func metric(f families, name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	v, _ := framework.Value(f, name, want)
	return v
}

func hasMetric(f families, name string, labels ...string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	_, ok := framework.Value(f, name, want)
	return ok
}

// waitLog waits until the exporter's log contains s.
func waitLog(t *testing.T, e *framework.Exporter, timeout time.Duration, s string) {
	t.Helper()
	testenv.WaitFor(t, timeout, "log line "+s, func() bool { return strings.Contains(e.Log.String(), s) })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// stopExporter sends SIGTERM and waits for the process to exit.
func stopExporter(t *testing.T, e *framework.Exporter) {
	t.Helper()
	e.Signal(15)
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("exporter did not exit within 10s of SIGTERM")
	}
}

// stats reads the kernel's counters of a block device (/dev/loop3 → loop3).
func stats(t *testing.T, dev string) device.Stats {
	t.Helper()
	s, err := device.Paths{}.ReadStats(filepath.Base(dev))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// statsPoint is one read of /proc/diskstats, timed before and after: on a busy machine
// the sampler can be held up between the read and the clock.
type statsPoint struct {
	from, at time.Time
	device.Stats
}

// statsRecorder samples a device's /proc/diskstats counters every period until stopped.
type statsRecorder struct {
	mu     sync.Mutex
	points []statsPoint
	stop   chan struct{}
	done   chan struct{}
}

func recordStats(t *testing.T, dev string, period time.Duration) *statsRecorder {
	t.Helper()
	name := filepath.Base(dev)
	r := &statsRecorder{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		sample := func() {
			from := time.Now()
			if s, err := (device.Paths{}).ReadStats(name); err == nil {
				r.mu.Lock()
				r.points = append(r.points, statsPoint{from, time.Now(), s})
				r.mu.Unlock()
			}
		}
		for {
			sample()
			select {
			case <-r.stop:
				sample() // what happened up to the stop
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(r.Stop)
	return r
}

// Stop takes a last sample and ends the sampling (idempotent).
func (r *statsRecorder) Stop() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

func (r *statsRecorder) Points() []statsPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]statsPoint(nil), r.points...)
}

// maxExcess is the largest amount by which the bytes a counter moved over any window of
// at least minWindow exceed rate × window. A token bucket of that rate lets through at
// most its burst on top, whatever the window. Windows are taken at their longest (from
// before the first read to after the second), so a sampler held up by a busy machine
// cannot make a rate look higher than it was.
func maxExcess(points []statsPoint, sectors func(device.Stats) uint64, rate float64, minWindow time.Duration) (excess float64, at string) {
	for i := range points {
		for j := i + 1; j < len(points); j++ {
			w := points[j].at.Sub(points[i].from)
			if w < minWindow {
				continue
			}
			bytes := float64(sectors(points[j].Stats)-sectors(points[i].Stats)) * 512
			if e := bytes - rate*w.Seconds(); e > excess {
				excess = e
				at = points[j].at.Sub(points[0].at).Round(time.Millisecond).String() + " after start, window " + w.Round(time.Millisecond).String()
			}
		}
	}
	return excess, at
}

func readSectors(s device.Stats) uint64  { return s.ReadSectors }
func writeSectors(s device.Stats) uint64 { return s.WriteSectors }

// activeSpan is the longest the counter can have taken to move by total bytes: from
// before the last point at which it had not moved yet to after the first point at which
// it had moved by total. Taken at its longest, a sampler held up by a busy machine cannot
// make a rate limit look broken. ok is false if it never moved by total.
func activeSpan(points []statsPoint, sectors func(device.Stats) uint64, total uint64) (time.Duration, bool) {
	if len(points) == 0 {
		return 0, false
	}
	base := sectors(points[0].Stats)
	start := points[0].from
	for _, p := range points {
		moved := (sectors(p.Stats) - base) * 512
		if moved == 0 {
			start = p.from
		}
		if moved >= total {
			return p.at.Sub(start), true
		}
	}
	return 0, false
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
