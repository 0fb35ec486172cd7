package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestSwappedProbeDirectoryRedirectsNoWrite swaps .diskprobe while the exporter holds it,
// as whoever can rename entries of a target's directory could: during the commit probe's
// preparation (a node of a loop device at commit.probe: the finished file's header,
// written through its path opened again, landed on sector 0 of the device), during the
// read file's (a FIFO at read.probe: opening it again by name to check it before its
// header wedged the worker) and in the middle of the fsync probe's rounds (a hard link to
// someone's file at fsync.probe). Each victim is left byte for byte as it was, each target
// reports an error naming its directory, /-/ready says why, and nothing is wedged: with
// the directory put back, the fsync target probes again.
func TestSwappedProbeDirectoryRedirectsNoWrite(t *testing.T) {
	testenv.RequireRoot(t)
	d := mkdirs(t, "fsync", "commit", "read", "victims")

	// The victims: a file of someone's, and a block device with data on it.
	hardVictim := filepath.Join(d["victims"], "etcd.db")
	writeRandom(t, hardVictim, 1<<20)
	loop := testenv.LoopDevice(t, 8<<20)
	writeRandom(t, loop, 8<<20)
	sums := map[string][32]byte{hardVictim: sha256File(t, hardVictim), loop: sha256File(t, loop)}

	// Rounds that never end for long: the fsync target's take 2 s each (20 ops at 10 a
	// second), the preparations 16 s (16 MiB at 1 MiB/s), so that both are under way at
	// the swap and would finish, had they gone on, before the victims are checked.
	cfg := fmt.Sprintf(`targets:
  - name: fsync
    path: %s
    fsync: {interval: 1s, ops: 20, file_size: 1MiB}
    limits: {iops: 10, timeout: 10s, min_free: 0}
  - name: commit
    path: %s
    commit: {interval: 1s, file_size: 16MiB}
    limits: {bandwidth: 1MiB, timeout: 10s, min_free: 0}
  - name: read
    path: %s
    randread: {interval: 1s, file_size: 16MiB}
    limits: {bandwidth: 1MiB, timeout: 10s, min_free: 0}
`, d["fsync"], d["commit"], d["read"])
	e := framework.StartExporter(t, framework.WriteConfig(t, cfg))
	framework.WaitMetric(t, e, 30*time.Second, "the fsync rounds running and both preparations under way", func(f families) bool {
		return runs(f, "fsync", "fsync") >= 1 && fileSize(filepath.Join(d["commit"], ".diskprobe", "commit.probe")) > 0 &&
			fileSize(filepath.Join(d["read"], ".diskprobe", "read.probe")) > 0
	})
	before := e.MustScrape()

	swap := func(root, name string, plant func(at string)) {
		must(t, os.Rename(filepath.Join(root, ".diskprobe"), filepath.Join(root, ".moved")))
		must(t, os.Mkdir(filepath.Join(root, ".diskprobe"), 0o700))
		plant(filepath.Join(root, ".diskprobe", name))
	}
	swap(d["fsync"], "fsync.probe", func(at string) { must(t, os.Link(hardVictim, at)) })
	var st unix.Stat_t
	must(t, unix.Stat(loop, &st))
	swap(d["commit"], "commit.probe", func(at string) { must(t, unix.Mknod(at, unix.S_IFBLK|0o600, int(st.Rdev))) })
	swap(d["read"], "read.probe", func(at string) { must(t, unix.Mkfifo(at, 0o600)) })
	swapped := time.Now()

	framework.WaitMetric(t, e, 30*time.Second, "an error on every swapped target", func(f families) bool {
		return errs(f, "fsync", "fsync") > errs(before, "fsync", "fsync") &&
			errs(f, "commit", "commit") > errs(before, "commit", "commit") &&
			errs(f, "read", "randread") > errs(before, "read", "randread")
	})
	alive(t, e)
	for _, target := range []string{"fsync", "commit", "read"} {
		dir := filepath.Join(d[target], ".diskprobe")
		if len(logLines(e, "target="+target, dir+" was moved or replaced")) == 0 {
			t.Errorf("%s: no log line saying %s was moved or replaced", target, dir)
		}
	}
	code, body := readyStatus(t, e)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "refuses to probe") || !strings.Contains(body, "was moved or replaced") {
		t.Errorf("/-/ready after the swaps: %d %q, want 503 saying which target refuses and why", code, body)
	}
	// Long enough for both preparations to have finished, had they gone on, and the fsync
	// file to have been cut again.
	time.Sleep(time.Until(swapped.Add(20 * time.Second)))
	alive(t, e)
	if _, _, err := e.Scrape(10 * time.Second); err != nil {
		t.Errorf("scrape after the swaps: %v", err)
	}
	for p, sum := range sums {
		if sha256File(t, p) != sum {
			t.Errorf("%s was written through the swapped directory", p)
		}
	}
	for target, name := range map[string]string{"fsync": "fsync.probe", "commit": "commit.probe", "read": "read.probe"} {
		if entries, _ := os.ReadDir(filepath.Join(d[target], ".diskprobe")); len(entries) != 1 || entries[0].Name() != name {
			t.Errorf("%s: the exporter created files in the directory put in place of its own: %v", target, entries)
		}
	}

	// Put back: the fsync target probes again, its worker never wedged.
	must(t, os.RemoveAll(filepath.Join(d["fsync"], ".diskprobe")))
	must(t, os.Rename(filepath.Join(d["fsync"], ".moved"), filepath.Join(d["fsync"], ".diskprobe")))
	errsAtRestore := errs(e.MustScrape(), "fsync", "fsync")
	framework.WaitMetric(t, e, 30*time.Second, "the fsync target succeeding again", func(f families) bool {
		return lastSuccess(f, "fsync", "fsync") > float64(time.Now().Add(-2*time.Second).Unix()) && errs(f, "fsync", "fsync") <= errsAtRestore+1
	})
	if sha256File(t, hardVictim) != sums[hardVictim] {
		t.Errorf("%s was written after the directory was put back", hardVictim)
	}
}

// fileSize is the size of path, 0 when it cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
