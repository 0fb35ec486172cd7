package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestKilledDuringPreparationNeverReadsAFileWithHoles kills the exporter with SIGKILL
// while it writes the read probe file (slowly, under a small bandwidth limit), as the OOM
// killer or a power cut would. The half-written file must not be taken as prepared at
// the next start: preparation starts again and ends with a file without holes. A file
// whose header says "prepared" but that has a hole (punched here) is not trusted either;
// an intact one is reused.
func TestKilledDuringPreparationNeverReadsAFileWithHoles(t *testing.T) {
	dir := mkdirs(t, "data")["data"]
	probeFile := filepath.Join(dir, ".diskprobe", "read.probe")
	config := func(bandwidth string) string {
		return fmt.Sprintf(`targets:
  - name: data
    path: %s
    randread: {interval: 1s, ops: 2, file_size: 32MiB}
    limits: {bandwidth: %s, min_free: 0}
`, dir, bandwidth)
	}
	cfg := framework.WriteConfig(t, config("4MiB"))
	prepBytes := func(f families) float64 {
		return value(f, "diskprobe_probe_io_bytes_total", "target", "data", "probe", "randread")
	}

	// 32 MiB at 4 MiB/s: killed about a third of the way.
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 20*time.Second, "a third of the read probe file written", func(f families) bool { return prepBytes(f) >= 10<<20 })
	if f := e.MustScrape(); skipped(f, "data", "randread", "preparing") == 0 || runs(f, "data", "randread") != 0 {
		t.Errorf("read rounds during preparation: %.0f skipped (reason preparing), %.0f run; want all skipped",
			skipped(f, "data", "randread", "preparing"), runs(f, "data", "randread"))
	}
	e.Cmd.Process.Kill()
	<-e.Done()
	hole, size := testenv.FirstHole(t, probeFile)
	header := probeHeader(t, probeFile)
	t.Logf("killed: %s, first hole at %d MiB of %d MiB", strings.ReplaceAll(header, "\n", " "), hole>>20, size>>20)
	if strings.Contains(header, "state=prepared") {
		t.Fatalf("a file killed during preparation says it is prepared: %q", header)
	}
	if hole >= size {
		t.Fatalf("no hole in a file killed a third of the way: the test did not kill mid-preparation")
	}

	// Restarted (with room to finish quickly): preparation starts again and completes.
	writeFile(t, cfg, config("256MiB"))
	e = startPrepared(t, cfg, "after SIGKILL")
	if len(logLines(e, "reusing the prepared read probe file")) != 0 {
		t.Errorf("the half-written file was reused")
	}
	stop(t, e)
	hole, size = testenv.FirstHole(t, probeFile)
	if !strings.Contains(probeHeader(t, probeFile), "state=prepared") || hole != size {
		t.Fatalf("after preparation: header %q, first hole at %d of %d", probeHeader(t, probeFile), hole, size)
	}

	// A "prepared" file with a hole in it.
	f, err := os.OpenFile(probeFile, os.O_RDWR, 0)
	must(t, err)
	must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 16<<20, 1<<20))
	f.Close()
	if hole, _ := testenv.FirstHole(t, probeFile); hole != 16<<20 {
		t.Fatalf("punched hole not seen at 16 MiB: first hole at %d", hole)
	}
	e = startPrepared(t, cfg, "with a punched hole")
	if len(logLines(e, "reusing the prepared read probe file")) != 0 {
		t.Errorf("a file with a hole was reused as prepared")
	}
	stop(t, e)
	if hole, size := testenv.FirstHole(t, probeFile); hole != size {
		t.Errorf("hole at %d of %d after preparing again", hole, size)
	}

	// An intact prepared file is reused: what makes the two checks above meaningful.
	e = framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "randread rounds on the reused file", func(f families) bool { return runs(f, "data", "randread") >= 2 })
	if len(logLines(e, "reusing the prepared read probe file")) != 1 || len(logLines(e, "read probe file prepared")) != 0 {
		t.Errorf("an intact prepared file was not reused")
	}
}

// startPrepared starts the exporter and waits until it has prepared the read probe file
// again and read from it without errors.
func startPrepared(t *testing.T, cfg, when string) *framework.Exporter {
	t.Helper()
	e := framework.StartExporter(t, cfg)
	f := framework.WaitMetric(t, e, 30*time.Second, "randread rounds "+when, func(f families) bool {
		return lastSuccess(f, "data", "randread") > 0 && runs(f, "data", "randread") >= 2
	})
	if n := errs(f, "data", "randread"); n != 0 {
		t.Errorf("%s: %.0f errors", when, n)
	}
	if len(logLines(e, "read probe file prepared")) != 1 {
		t.Errorf("%s: the read probe file was not prepared again", when)
	}
	return e
}

func stop(t *testing.T, e *framework.Exporter) {
	t.Helper()
	e.Signal(syscall.SIGTERM)
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("exporter did not stop on SIGTERM")
	}
}
