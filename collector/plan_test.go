package collector

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// startUnanswered applies a plan in which the target's path did not answer in time, as
// a hung mount at start or on a reload leaves it: the worker inspects it.
func startUnanswered(t *testing.T, tg config.Target, log io.Writer) (*Scheduler, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	s := NewScheduler(m, device.Paths{ProcFS: "/proc", SysFS: "/sys"}, RealClock{}, slog.New(slog.NewTextHandler(log, nil)))
	if err := s.Apply(&Plan{file: "diskprobe.yml", wait: time.Second, targets: []planned{{parsed: tg}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(time.Second) })
	return s, m
}

// TestPathThatAnswersLateIsInspectedOnItsWorker: a target whose path did not answer when
// it was configured is not ready, reports what its path says once it answers (here: it
// does not exist) as a probe error, and is probed without a restart once it is right.
func TestPathThatAnswersLateIsInspectedOnItsWorker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "late")
	tg := config.Target{Name: "late", Path: path, Line: 2, Limits: config.DefaultLimits,
		Probe: map[string]*config.ProbeConfig{config.ProbeFsync: {Interval: time.Second, Ops: 1, BlockSize: 4096, FileSize: 1 << 20}}}
	tg.Limits.MinFree = 0
	var log testenv.SyncBuffer
	s, m := startUnanswered(t, tg, &log)
	if s.Ready() == nil {
		t.Error("ready with a target whose path has not answered")
	}
	testenv.WaitFor(t, 10*time.Second, "the missing path reported", func() bool {
		return testutil.ToFloat64(m.errors.WithLabelValues("late", "fsync")) >= 1
	})
	if !strings.Contains(log.String(), "diskprobe.yml:2: targets[0].path: "+path+" does not exist") {
		t.Errorf("the error does not name file, line, field and path:\n%s", log.String())
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a round once the path is there", func() bool {
		return testutil.ToFloat64(m.lastSuccess.WithLabelValues("late", "fsync")) > 0
	})
	if s.Ready() != nil {
		t.Error("not ready once the path answered")
	}
}

// TestPathThatTurnsOutABlockDeviceSaysToReload: a path that did not answer is probed as a
// directory would be; if it turns out to be a block device, whose default probes differ,
// its rounds fail with an error that says to reload, rather than write to a device.
func TestPathThatTurnsOutABlockDeviceSaysToReload(t *testing.T) {
	dev := testenv.LoopDevice(t, 16<<20)
	tg := config.Target{Name: "dev", Path: dev, Line: 2, Limits: config.DefaultLimits}
	var log testenv.SyncBuffer
	_, m := startUnanswered(t, tg, &log)
	testenv.WaitFor(t, 20*time.Second, "the target type mismatch reported", func() bool {
		return testutil.ToFloat64(m.errors.WithLabelValues("dev", "fsync")) >= 1
	})
	if !strings.Contains(log.String(), "turned out to be a blockdev") {
		t.Errorf("no error saying the path is a block device:\n%s", log.String())
	}
}

// A reload of a file where a target only moved (a comment above it, a target inserted
// before it) must keep it running: its lines and index are where it is, not what it is.
// Restarted, it would lose its counters and prepare its read file again.
func TestTargetThatOnlyMovedInTheFileIsKeptByAReload(t *testing.T) {
	before, err := config.Parse([]byte("targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: 1m}\n"), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	after, err := config.Parse([]byte("targets:\n  - name: z\n    path: /var\n  # moved\n  - name: a\n\n    path: /tmp\n    fsync: {interval: 1m}\n"), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !sameTarget(before.Targets[0], after.Targets[1]) {
		t.Errorf("a target that only moved is restarted by a reload:\n%+v\n%+v", before.Targets[0], after.Targets[1])
	}
	changed, err := config.Parse([]byte("targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: 2m}\n"), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	if sameTarget(before.Targets[0], changed.Targets[0]) {
		t.Error("a target whose interval changed is kept as it was")
	}
}
