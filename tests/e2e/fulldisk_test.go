package e2e

import (
	"errors"
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

// TestFullDiskStopsWritesBeforeENOSPC fills a small loop filesystem under a running fsync
// probe. First min_free stops the probe's writes before the disk is full (rounds skipped
// with reason low_free_space, no I/O, free space left untouched). Then, with min_free 0
// and a probe file bigger than the space left, and finally with not a byte left, ENOSPC
// is a counted error, logged once per state change; the process stays up and no
// half-written probe file remains. Freeing space lets the probe recover by itself.
func TestFullDiskStopsWritesBeforeENOSPC(t *testing.T) {
	testenv.RequireRoot(t)
	_, dir := testenv.LoopExt4(t, 64<<20)
	const floor = 8 << 20
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: full
    path: %s
    fsync: {interval: 1s, ops: 3, block_size: 4KiB, file_size: 1MiB}
    limits: {timeout: 10s, min_free: 8MiB}
`, dir))
	readsDir := filepath.Join(dir, "reads")
	must(t, os.Mkdir(readsDir, 0o755))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "two fsync rounds", func(f families) bool { return runs(f, "full", "fsync") >= 2 })

	// Leave 4 MiB: under the 8 MiB floor, far from ENOSPC.
	filler := filepath.Join(dir, "filler")
	fill(t, filler, freeBytes(t, dir)-floor/2)
	leftBefore := freeBytes(t, dir)
	t.Logf("filled: %d MiB free, floor %d MiB", leftBefore>>20, floor>>20)
	start := e.MustScrape()
	low := framework.WaitMetric(t, e, 15*time.Second, "rounds skipped for low free space", func(f families) bool {
		return skipped(f, "full", "fsync", "low_free_space") >= skipped(start, "full", "fsync", "low_free_space")+3
	})
	ioOps := func(f families) float64 {
		return value(f, "diskprobe_probe_io_operations_total", "target", "full", "probe", "fsync")
	}
	// One round may have been under way when the disk filled; after it nothing is written.
	time.Sleep(3 * time.Second)
	low2 := e.MustScrape()
	if ioOps(low2) != ioOps(low) {
		t.Errorf("the probe kept writing under the free-space floor: %.0f → %.0f operations", ioOps(low), ioOps(low2))
	}
	if n := errs(low2, "full", "fsync"); n != 0 {
		t.Errorf("%.0f errors: running under min_free is a skipped round, not an error", n)
	}
	if left := freeBytes(t, dir); left < leftBefore {
		t.Errorf("free space went down under the floor: %d → %d bytes", leftBefore, left)
	}
	if n := len(logLines(e, "free space is under limits.min_free", "target=full")); n != 1 {
		t.Errorf("%d log lines about the free-space floor; want one per change of state", n)
	}

	// min_free 0 and a 16 MiB probe file with 4 MiB left: ENOSPC, counted. Beside it, a
	// new target whose 16 MiB read probe file would not fit above its 1 MiB floor: its
	// preparation never starts, and its rounds are skipped, not failed.
	writeFile(t, cfg, fmt.Sprintf(`targets:
  - name: full
    path: %s
    fsync: {interval: 1s, ops: 3, block_size: 4KiB, file_size: 16MiB}
    limits: {timeout: 10s, min_free: 0}
  - name: reads
    path: %s
    randread: {interval: 1s, ops: 2, file_size: 16MiB}
    limits: {timeout: 10s, min_free: 1MiB}
`, dir, readsDir))
	e.Signal(syscall.SIGHUP)
	enospc := framework.WaitMetric(t, e, 15*time.Second, "ENOSPC counted as an error", func(f families) bool {
		return errs(f, "full", "fsync") >= 3 && skipped(f, "reads", "randread", "low_free_space") >= 3
	})
	if n := errs(enospc, "reads", "randread"); n != 0 {
		t.Errorf("a read probe file that does not fit above min_free counted %.0f errors; want skipped rounds", n)
	}
	if _, err := os.Stat(filepath.Join(readsDir, ".diskprobe", "read.probe")); err == nil {
		t.Errorf("the read probe file was started although it does not fit above min_free")
	}
	if v := value(enospc, "diskprobe_config_last_reload_successful"); v != 1 {
		t.Fatalf("reload failed: %s", e.Log.String())
	}
	if n := len(logLines(e, "probe failed", "target=full", "no space left on device")); n != 1 {
		t.Errorf("%d log lines about ENOSPC over %.0f failed rounds; want one", n, errs(enospc, "full", "fsync"))
	}
	checkNoHalfWrittenFiles(t, dir)

	// Not a byte left.
	fill(t, filler+"2", -1)
	zero := e.MustScrape()
	framework.WaitMetric(t, e, 15*time.Second, "errors on a completely full disk", func(f families) bool {
		return errs(f, "full", "fsync") >= errs(zero, "full", "fsync")+3
	})
	checkNoHalfWrittenFiles(t, dir)
	alive(t, e)

	// Space comes back: the probe recovers by itself.
	os.Remove(filler)
	os.Remove(filler + "2")
	freed := time.Now()
	framework.WaitMetric(t, e, 15*time.Second, "an fsync round after space was freed", func(f families) bool {
		return lastSuccess(f, "full", "fsync") > float64(freed.UnixNano())/1e9
	})
	if len(logLines(e, "probe recovered", "target=full")) == 0 {
		t.Errorf("no log line saying the probe recovered")
	}
	t.Logf("ENOSPC log lines: %q", logLines(e, "probe failed", "target=full"))
}

// fill writes a file of n bytes (n < 0: until ENOSPC) and syncs it.
func fill(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for written := int64(0); n < 0 || written < n; {
		chunk := buf
		if n >= 0 && n-written < int64(len(chunk)) {
			chunk = chunk[:n-written]
		}
		m, err := f.Write(chunk)
		written += int64(m)
		if errors.Is(err, syscall.ENOSPC) && n < 0 {
			break
		}
		if err != nil {
			t.Fatalf("filling %s: %v", path, err)
		}
	}
	if err := f.Sync(); err != nil && (n >= 0 || !errors.Is(err, syscall.ENOSPC)) {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkNoHalfWrittenFiles fails when a probe file in <dir>/.diskprobe lacks our header or
// is not fully allocated: what a failed creation on a full disk must never leave behind.
func checkNoHalfWrittenFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, ".diskprobe"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		p := filepath.Join(dir, ".diskprobe", de.Name())
		h := probeHeader(t, p)
		if !strings.HasPrefix(h, "diskprobe_exporter probe file") {
			t.Errorf("%s has no header after ENOSPC: %q", p, h[:min(len(h), 40)])
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		var size int64
		if i := strings.Index(h, "\nsize="); i >= 0 {
			_, _ = fmt.Sscanf(h[i+1:], "size=%d", &size) // no number: size stays 0, reported below
		}
		if size <= 0 {
			t.Errorf("%s: no size in its header %q", p, h)
			continue
		}
		if st.Blocks*512 < size || st.Size < size {
			t.Errorf("%s is half-written after ENOSPC: header says %d bytes, %d allocated, size %d", p, size, st.Blocks*512, st.Size)
		}
	}
}
