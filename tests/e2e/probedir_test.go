package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestProbeDirMountedOverWhileRunningStopsProbing mounts another filesystem over the probe
// directory of a running exporter: it must stop probing there rather than go on writing onto
// the other filesystem and calling it the measured path's disk.
func TestProbeDirMountedOverWhileRunningStopsProbing(t *testing.T) {
	testenv.RequireRoot(t)
	_, fsA := testenv.LoopExt4(t, 256<<20)
	_, fsB := testenv.LoopExt4(t, 64<<20)
	data, beside := filepath.Join(fsA, "etcd"), filepath.Join(fsA, "diskprobe-etcd")
	for _, d := range []string{data, beside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e := framework.StartExporter(t, framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    probe_dir: %s
    fsync: {interval: 1s, ops: 2, file_size: 1MiB}
    limits: {min_free: 1MiB}
`, data, beside)))
	framework.WaitMetric(t, e, 20*time.Second, "fdatasync samples", func(f families) bool {
		return value(f, "diskprobe_fdatasync_duration_seconds", "target", "etcd") >= 2
	})
	// Another filesystem now sits where the probe files were: the exporter must not go on
	// writing there and calling it the measured path's disk.
	testenv.BindMount(t, fsB, beside)
	testenv.WaitFor(t, 15*time.Second, "the log naming the probe directory", func() bool {
		return len(logLines(e, beside+" is no longer on the filesystem it was on")) > 0
	})
	framework.WaitMetric(t, e, 10*time.Second, "an error counted", func(f families) bool {
		return value(f, "diskprobe_probe_errors_total", "target", "etcd", "probe", "fsync") > 0
	})
	if _, err := os.Stat(filepath.Join(fsB, ".diskprobe")); err == nil {
		t.Errorf("the exporter wrote onto the filesystem mounted over its probe directory")
	}
}
