package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestFilesystemWithoutFallocateStillProbes runs every probe on a FUSE filesystem that,
// like bindfs and NFS before 4.2, has no fallocate: the fsync probe and the read probe
// file's preparation used to fail every round with `fallocate …: operation not
// supported`. They extend their files with ftruncate instead, say so once in the log,
// and produce samples.
func TestFilesystemWithoutFallocateStillProbes(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: fuse
    path: %s
    fsync: {interval: 1s, ops: 5, block_size: 4KiB, file_size: 64KiB}
    randread: {interval: 1s, ops: 5, file_size: 4MiB}
    seqread: {interval: 1s, bytes: 1MiB, block_size: 256KiB}
    seqwrite: {interval: 1s, bytes: 1MiB, block_size: 256KiB}
    limits: {timeout: 10s, min_free: 0}
`, h.Dir))
	e := framework.StartExporter(t, cfg)
	f := framework.WaitMetric(t, e, 30*time.Second, "samples from every probe", func(f families) bool {
		for _, p := range []string{"fsync", "randread", "seqread", "seqwrite"} {
			if lastSuccess(f, "fuse", p) == 0 {
				return false
			}
		}
		// Several fsync rounds: with a 64 KiB file every other round cuts a new one.
		return runs(f, "fuse", "fsync") >= 4
	})
	for _, p := range []string{"fsync", "randread", "seqread", "seqwrite"} {
		if n := errs(f, "fuse", p); n != 0 {
			t.Errorf("%.0f %s errors on a filesystem without fallocate", n, p)
		}
	}
	syncs := histogramOf(f, "diskprobe_fdatasync_duration_seconds", "fuse").count
	reads := histogramOf(f, "diskprobe_read_duration_seconds", "fuse").count
	t.Logf("fdatasync samples %d, read samples %d", syncs, reads)
	if syncs == 0 || reads == 0 {
		t.Errorf("no samples: %d fdatasyncs, %d reads", syncs, reads)
	}
	// Said once, not once per file or per round.
	if lines := logLines(e, "fallocate is not supported", "target=fuse"); len(lines) != 1 {
		t.Errorf("%d log lines about the missing fallocate; want 1:\n%v", len(lines), lines)
	} else {
		t.Logf("logged: %s", lines[0])
	}
	if lines := logLines(e, "operation not supported"); len(lines) != 0 {
		t.Errorf("fallocate still fails: %v", lines)
	}
}

// stuckAlertThreshold reads DiskprobeProbeStuck's expression from the shipped rules: it
// compares diskprobe_probe_inflight_seconds with the default limits.timeout (30s). The
// tests use a 2s timeout, so they evaluate the same expression against theirs.
func stuckAlertThreshold(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`alert: DiskprobeProbeStuck\s*\n(?:\s*#.*\n)*\s*expr: diskprobe_probe_inflight_seconds > (\d+)\n`).FindSubmatch(b)
	if m == nil {
		t.Fatal("DiskprobeProbeStuck is no longer `diskprobe_probe_inflight_seconds > N`: update this test")
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	if v != config.DefaultLimits.Timeout.Seconds() {
		t.Fatalf("DiskprobeProbeStuck compares with %vs, the default limits.timeout is %s", v, config.DefaultLimits.Timeout)
	}
	return v
}

// stuckExprTrue is DiskprobeProbeStuck's expression for a target whose limits.timeout
// is timeout instead of the default.
func stuckExprTrue(f families, target, probe string, timeout time.Duration) bool {
	return inflight(f, target, probe) > timeout.Seconds()
}

// startOnHangFS starts the exporter with targets on h. Its cleanup releases h first: an
// exporter thread held there would keep the process from being reaped.
func startOnHangFS(t *testing.T, h *testenv.HangFS, cfg string, opts framework.ExporterOptions) *framework.Exporter {
	t.Helper()
	e := framework.StartExporterWith(t, cfg, opts)
	t.Cleanup(h.Release)
	return e
}

// getBody is the body of GET path on the exporter, which must answer 200.
func getBody(t *testing.T, e *framework.Exporter, path string) string {
	t.Helper()
	resp, err := oneShot.Get("http://" + e.Addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
	}
	return string(b)
}

// getStatus is the status code of GET path on the exporter.
func getStatus(t *testing.T, e *framework.Exporter, path string) int {
	t.Helper()
	resp, err := oneShot.Get("http://" + e.Addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metricsAnswer is the readiness StartExporterWith waits for when a target hangs from
// the start: /-/ready says 503 until every path has answered, /metrics answers at once.
func metricsAnswer(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// goroutineCount is the exporter's goroutines at rest: the least of five goroutine profiles
// taken 50ms apart (each request's own two goroutines included, the same each time). A
// scrape under way adds its connection and the registry's collection workers, which Gather
// starts as it goes: go_goroutines, read during a scrape, went 15 -> 21 where 20 was all
// there was, and a profile taken while the test's watcher scraped counted 9 to 15 for the
// same exporter. A leak stays; the least of a few samples leaves out what comes and goes.
func goroutineCount(t *testing.T, e *framework.Exporter) int {
	t.Helper()
	least := -1
	for i := range 5 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		dump := getBody(t, e, "/debug/pprof/goroutine?debug=1")
		var n int
		if _, err := fmt.Sscanf(dump, "goroutine profile: total %d", &n); err != nil {
			t.Fatalf("goroutine profile: %v in %.80q", err, dump)
		}
		if least < 0 || n < least {
			least = n
		}
	}
	return least
}

// withPprof are the exporter options of a test that counts goroutines.
var withPprof = framework.ExporterOptions{Args: []string{"--web.enable-pprof"}}

// worstScrape is the slowest scrape in obs; it fails the test when one failed or took
// over 1s (/metrics must answer whatever hangs).
func worstScrape(t *testing.T, obs []observation, while string) time.Duration {
	t.Helper()
	var worst time.Duration
	for _, o := range obs {
		if o.err != nil {
			t.Errorf("a scrape failed while %s: %v", while, o.err)
			continue
		}
		worst = max(worst, o.latency)
	}
	t.Logf("worst scrape while %s: %s over %d scrapes", while, fmtDur(worst), len(obs))
	if worst > time.Second {
		t.Errorf("a scrape took %s while %s; /metrics must answer within 1s", worst, while)
	}
	return worst
}

const hungTimeout = 2 * time.Second

// fsyncTarget is a target with a 1s fsync probe and a 2s limits.timeout, as YAML.
func fsyncTarget(name, path string, ops int) string {
	return fmt.Sprintf("  - name: %s\n    path: %s\n    fsync: {interval: 1s, ops: %d, block_size: 4KiB, file_size: 1MiB}\n    limits: {timeout: 2s, min_free: 0}\n", name, path, ops)
}

// TestTargetHungBeforeStartDoesNotHoldUpTheExporter starts the exporter with a target on
// a FUSE mount that answers nothing, not even stat, as a hard NFS mount whose server is
// gone: start-up used to stat it before the HTTP server was up, and wait forever.
func TestTargetHungBeforeStartDoesNotHoldUpTheExporter(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	steady := t.TempDir()
	cfg := framework.WriteConfig(t, "targets:\n"+fsyncTarget("hung", h.Dir, 2)+fsyncTarget("steady", steady, 2))
	testenv.Binary(t)
	h.Hang()
	start := time.Now()
	opts := withPprof
	opts.Ready = metricsAnswer
	e := startOnHangFS(t, h, cfg, opts)
	up := time.Since(start)
	t.Logf("/metrics answered %s after the start with a target hung", fmtDur(up))
	if up > 2*time.Second {
		t.Errorf("/metrics answered only %s after the start; want within 2s whatever hangs", up)
	}
	if code := getStatus(t, e, "/-/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/-/ready %d while a target's path has not answered; want 503 (docs/configuration.md: every target inspected)", code)
	}
	if code := getStatus(t, e, "/-/healthy"); code != http.StatusOK {
		t.Errorf("/-/healthy %d; want 200", code)
	}
	w := watch(e, 200*time.Millisecond, 5*time.Second)
	f := framework.WaitMetric(t, e, 15*time.Second, "the hung target's in-flight age and a stuck error", func(f families) bool {
		return inflight(f, "hung", "fsync") > 0 && errs(f, "hung", "fsync") >= 1
	})
	a1 := inflight(f, "hung", "fsync")
	gEarly := goroutineCount(t, e)
	time.Sleep(2 * time.Second)
	f2 := e.MustScrape()
	a2 := inflight(f2, "hung", "fsync")
	t.Logf("hung target: in-flight %.1fs then %.1fs, %.0f errors, %.0f rounds skipped", a1, a2, errs(f2, "hung", "fsync"), skipped(f2, "hung", "fsync", "inflight"))
	if a2 <= a1 || !stuckExprTrue(f2, "hung", "fsync", hungTimeout) {
		t.Errorf("in-flight age not growing past limits.timeout: %.1fs, then %.1fs", a1, a2)
	}
	if n := errs(f2, "hung", "fsync"); n != 1 {
		t.Errorf("%.0f errors for one stuck operation; want 1", n)
	}
	if n := len(logLines(e, "I/O operation stuck in the kernel", "target=hung")); n != 1 {
		t.Errorf("%d log lines about the stuck operation; want 1", n)
	}
	if n := len(logLines(e, "did not answer", "target")); n != 1 {
		t.Errorf("%d warnings that the path did not answer at start; want 1", n)
	}
	if r := runs(f2, "steady", "fsync"); r < 4 || errs(f2, "steady", "fsync") != 0 {
		t.Errorf("the other target ran %.0f rounds with %.0f errors meanwhile", r, errs(f2, "steady", "fsync"))
	}

	gLate, lateDump := goroutineCount(t, e), getBody(t, e, "/debug/pprof/goroutine?debug=1")
	releasedAt := time.Now()
	h.Release()
	framework.WaitMetric(t, e, 15*time.Second, "the hung target's first round after the release", func(f families) bool {
		return lastSuccess(f, "hung", "fsync") > float64(releasedAt.UnixNano())/1e9 && inflight(f, "hung", "fsync") == 0
	})
	t.Logf("recovered %s after the release", fmtDur(time.Since(releasedAt)))
	if code := getStatus(t, e, "/-/ready"); code != http.StatusOK {
		t.Errorf("/-/ready %d once every path has answered; want 200", code)
	}
	time.Sleep(time.Second)
	obs := w.Stop()
	worstScrape(t, between(obs, start, releasedAt), "a target hung since the start")
	gAfter := goroutineCount(t, e)
	t.Logf("goroutines: %d early in the hang, %d late in it, %d after the release", gEarly, gLate, gAfter)
	// No growth while hung, and against the healthy exporter after the release only the
	// one stuck stat. One more allowed, for a goroutine that comes and goes.
	if gLate > gEarly+1 || gLate > gAfter+1+1 {
		t.Errorf("goroutines grew while the target hung: %d early, %d late, %d after the release (a hung target must never get a second one); late in the hang:\n%s", gEarly, gLate, gAfter, lateDump)
	}
}

// TestSIGTERMExitsWhileAPathHangsAtStart: the stat of a hung path is abandoned, not waited for.
func TestSIGTERMExitsWhileAPathHangsAtStart(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	cfg := framework.WriteConfig(t, "targets:\n"+fsyncTarget("hung", h.Dir, 2))
	h.Hang()
	e := startOnHangFS(t, h, cfg, framework.ExporterOptions{Ready: metricsAnswer})
	framework.WaitMetric(t, e, 10*time.Second, "the hung target's in-flight age", func(f families) bool { return inflight(f, "hung", "fsync") > 0 })
	if exited, _ := exitAfterSIGTERM(t, e); exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM with a path hung since the start; want within 5s", exited)
	}
}

// hungCall is one file system call a probe makes each round, held on the FUSE mount.
type hungCall struct {
	name   string
	probe  string // whose in-flight age shows it
	probes string // the target's probe keys
	limits string
	ops    []string // held; none: every operation
	// ready says the probe is where the held call comes next (default: one successful round).
	ready func(f families) bool
	// working says the probe works again after the release (default: a successful round
	// after it).
	working func(f families, after float64) bool
}

// TestEveryHungCallIsReportedStuck holds, under a running exporter, each kind of call a
// probe makes on its target's filesystem, the edges included: the per-round stat of the
// target and fstat of the open file, the statfs of the free-space floor, creating a probe
// file, the writes and reads, fdatasync, and the preparation of the read probe file. Each
// must show as the probe's in-flight age within a round, make DiskprobeProbeStuck's
// expression true past limits.timeout, add no goroutine, recover by itself once
// released, and not keep SIGTERM from ending the process within 5s.
func TestEveryHungCallIsReportedStuck(t *testing.T) {
	testenv.RequireRoot(t)
	stuckAlertThreshold(t)
	const (
		fsync    = "fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}"
		randread = "randread: {interval: 1s, ops: 4, file_size: 4MiB}"
		seqread  = "seqread: {interval: 1s, bytes: 1MiB, block_size: 256KiB}"
		seqwrite = "seqwrite: {interval: 1s, bytes: 1MiB, block_size: 256KiB}"
		commit   = "commit: {interval: 1s, ops: 2, pages: 3, file_size: 2MiB}"
		noFloor  = "limits: {timeout: 2s, min_free: 0}"
		floor    = "limits: {timeout: 2s, min_free: 1KiB}"
	)
	cases := []hungCall{
		{name: "fsync/everything", probe: "fsync", probes: fsync, limits: noFloor},
		{name: "fsync/stat of the target", probe: "fsync", probes: fsync, limits: noFloor, ops: []string{testenv.OpGetattr}},
		{name: "fsync/statfs of the free-space floor", probe: "fsync", probes: fsync, limits: floor, ops: []string{testenv.OpStatfs}},
		{name: "fsync/write", probe: "fsync", probes: fsync, limits: noFloor, ops: []string{testenv.OpWrite}},
		{name: "fsync/fdatasync", probe: "fsync", probes: fsync, limits: noFloor, ops: []string{testenv.OpFsync}},
		// Two 4 KiB blocks after the header fill the file: every round cuts a new one.
		{name: "fsync/creating a probe file", probe: "fsync", limits: noFloor, ops: []string{testenv.OpCreate},
			probes: "fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 12KiB}"},
		{name: "randread/everything", probe: "randread", probes: randread, limits: noFloor},
		{name: "randread/read", probe: "randread", probes: randread, limits: noFloor, ops: []string{testenv.OpRead}},
		{name: "seqread/read", probe: "seqread", probes: seqread, limits: noFloor, ops: []string{testenv.OpRead}},
		{name: "seqwrite/write", probe: "seqwrite", probes: seqwrite, limits: noFloor, ops: []string{testenv.OpWrite}},
		{name: "seqwrite/fdatasync", probe: "seqwrite", probes: seqwrite, limits: noFloor, ops: []string{testenv.OpFsync}},
		{name: "seqwrite/statfs of the free-space floor", probe: "seqwrite", probes: seqwrite, limits: floor, ops: []string{testenv.OpStatfs}},
		{name: "commit/write", probe: "commit", probes: commit, limits: noFloor, ops: []string{testenv.OpWrite}},
		{name: "commit/fdatasync", probe: "commit", probes: commit, limits: noFloor, ops: []string{testenv.OpFsync}},
		{name: "commit/statfs of the free-space floor", probe: "commit", probes: commit, limits: floor, ops: []string{testenv.OpStatfs}},
	}
	// The read probe file's preparation: 128 MiB at 8 MiB/s, held once it is under way,
	// and again (for SIGTERM) before it is done.
	prepared := func(f families) float64 {
		return value(f, "diskprobe_probe_io_bytes_total", "target", "fuse", "probe", "randread")
	}
	prepare := func(ops ...string) hungCall {
		var atReady float64
		return hungCall{probe: "randread", probes: "randread: {interval: 1s, ops: 4, file_size: 128MiB}", ops: ops,
			limits: "limits: {timeout: 2s, min_free: 0, bandwidth: 8MiB}",
			ready:  func(f families) bool { atReady = prepared(f); return atReady >= 8<<20 },
			working: func(f families, _ float64) bool {
				return prepared(f) >= atReady+8<<20 && inflight(f, "fuse", "randread") < 1
			}}
	}
	everything, writes := prepare(), prepare(testenv.OpWrite)
	everything.name, writes.name = "preparing the read file/everything", "preparing the read file/write"
	cases = append(cases, everything, writes)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { hangOneCall(t, c) })
	}
}

func hangOneCall(t *testing.T, c hungCall) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	cfg := framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: fuse\n    path: %s\n    %s\n    %s\n", h.Dir, c.probes, c.limits))
	e := startOnHangFS(t, h, cfg, withPprof)
	ready := c.ready
	if ready == nil {
		ready = func(f families) bool { return lastSuccess(f, "fuse", c.probe) > 0 }
	}
	before := framework.WaitMetric(t, e, 30*time.Second, "the probe under way", ready)
	w := watch(e, 200*time.Millisecond, 5*time.Second)
	time.Sleep(600 * time.Millisecond) // a few scrapes before the hang
	g0 := goroutineCount(t, e)
	heldAt := time.Now()
	h.Hang(c.ops...)
	framework.WaitMetric(t, e, 5*time.Second, "an in-flight age within a round", func(f families) bool { return inflight(f, "fuse", c.probe) > 0 })
	seen := time.Since(heldAt)
	framework.WaitMetric(t, e, 10*time.Second, "DiskprobeProbeStuck's expression true and one error", func(f families) bool {
		return stuckExprTrue(f, "fuse", c.probe, hungTimeout) && errs(f, "fuse", c.probe) > errs(before, "fuse", c.probe)
	})
	time.Sleep(1500 * time.Millisecond) // rounds keep coming due, and are skipped
	late := e.MustScrape()
	gStuck, stuckDump := goroutineCount(t, e), getBody(t, e, "/debug/pprof/goroutine?debug=1")
	t.Logf("in-flight age seen %s after the hang; %.1fs at the end, %.0f rounds skipped, %d calls held",
		fmtDur(seen), inflight(late, "fuse", c.probe), skipped(late, "fuse", c.probe, "inflight"), h.Held())
	if seen > 2500*time.Millisecond {
		t.Errorf("the in-flight age showed %s after the hang; want within about one 1s interval", seen)
	}
	if d := errs(late, "fuse", c.probe) - errs(before, "fuse", c.probe); d != 1 {
		t.Errorf("%.0f errors for one stuck call; want 1", d)
	}
	releasedAt := time.Now()
	h.Release()
	working := c.working
	if working == nil {
		working = func(f families, after float64) bool {
			return lastSuccess(f, "fuse", c.probe) > after && inflight(f, "fuse", c.probe) == 0
		}
	}
	framework.WaitMetric(t, e, 20*time.Second, "the probe working again after the release", func(f families) bool {
		return working(f, float64(releasedAt.UnixNano())/1e9)
	})
	t.Logf("recovered %s after the release", fmtDur(time.Since(releasedAt)))
	obs := w.Stop()
	worstScrape(t, between(obs, heldAt, releasedAt), "the call hung")
	t.Logf("goroutines: %d before the hang, %d once reported stuck", g0, gStuck)
	// The worker waits in the kernel itself: no goroutine is added for the hang (one more
	// allowed, for a goroutine that comes and goes).
	if gStuck > g0+1 {
		t.Errorf("goroutines grew while the call hung: %d before, %d while stuck:\n%s", g0, gStuck, stuckDump)
	}

	// Held again, SIGTERM ends the process anyway.
	h.Hang(c.ops...)
	framework.WaitMetric(t, e, 5*time.Second, "the call held again", func(f families) bool { return inflight(f, "fuse", c.probe) > 0.3 })
	if exited, _ := exitAfterSIGTERM(t, e); exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM while hung; want within 5s", exited)
	}
}

// TestReloadWhileATargetHangs reloads, by SIGHUP and by POST /-/reload, while a target's
// FUSE mount answers nothing. A reload used to stat every target under the scheduler's
// lock and, for SIGHUP, inside the signal loop: it never answered and SIGTERM was no
// longer seen. Now it answers within 2s, applies to the other targets, leaves the hung
// target alone, keeps /metrics answering and sets the reload gauges; a new target on the
// hung mount is started uninspected (and /-/ready says 503 until it answers); after the
// release everything recovers and the next reload works.
func TestReloadWhileATargetHangs(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	d := mkdirs(t, "a", "b")
	late := filepath.Join(h.Dir, "late")
	must(t, os.Mkdir(late, 0o755))
	target := fsyncTarget
	cfg := framework.WriteConfig(t, "targets:\n"+target("hung", h.Dir, 2)+target("a", d["a"], 2))
	opts := withPprof
	opts.Args = append([]string{"--web.enable-lifecycle"}, opts.Args...)
	e := startOnHangFS(t, h, cfg, opts)
	framework.WaitMetric(t, e, 15*time.Second, "rounds on both targets", func(f families) bool {
		return runs(f, "hung", "fsync") >= 1 && runs(f, "a", "fsync") >= 1
	})
	w := watch(e, 200*time.Millisecond, 5*time.Second)
	time.Sleep(time.Second)
	g0 := goroutineCount(t, e)
	heldAt := time.Now()
	h.Hang()
	framework.WaitMetric(t, e, 5*time.Second, "the hung target's in-flight age", func(f families) bool { return inflight(f, "hung", "fsync") > 0.5 })
	reloadedAt := func(f families) float64 { return value(f, "diskprobe_config_last_reload_success_timestamp_seconds") }

	// SIGHUP: a changed target and a new one beside the hung one.
	writeFile(t, cfg, "targets:\n"+target("hung", h.Dir, 2)+target("a", d["a"], 3)+target("b", d["b"], 2))
	ts0 := reloadedAt(e.MustScrape())
	sent := time.Now()
	e.Signal(syscall.SIGHUP)
	f := framework.WaitMetric(t, e, 10*time.Second, "the SIGHUP reload", func(f families) bool { return reloadedAt(f) > ts0 })
	hup := time.Since(sent)
	t.Logf("SIGHUP reload applied within %s while a target hangs", fmtDur(hup))
	if hup > 2*time.Second {
		t.Errorf("the SIGHUP reload took %s; want within 2s", hup)
	}
	if v := value(f, "diskprobe_config_last_reload_successful"); v != 1 {
		t.Errorf("diskprobe_config_last_reload_successful %v after a good reload", v)
	}
	framework.WaitMetric(t, e, 10*time.Second, "the new target's rounds", func(f families) bool { return runs(f, "b", "fsync") >= 1 })

	// POST /-/reload with a second target on the hung mount: it cannot be inspected, is
	// started all the same, and readiness says so.
	writeFile(t, cfg, "targets:\n"+target("hung", h.Dir, 2)+target("a", d["a"], 3)+target("b", d["b"], 2)+target("late", late, 2))
	sent = time.Now()
	code, body := post(t, "http://"+e.Addr+"/-/reload")
	answered := time.Since(sent)
	t.Logf("POST /-/reload with a new target on the hung mount answered %d in %s", code, fmtDur(answered))
	if code != http.StatusOK || answered > 2*time.Second {
		t.Errorf("POST /-/reload: %d %q after %s; want 200 within 2s", code, body, answered)
	}
	// The log reaches the test through a pipe, a moment after the answer.
	testenv.WaitFor(t, 5*time.Second, "a warning that the new target's path did not answer", func() bool {
		return len(logLines(e, "did not answer", "targets[3].path")) == 1
	})
	if code := getStatus(t, e, "/-/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/-/ready %d with a configured target that never answered; want 503", code)
	}
	// A broken file while hung: 500 within 2s, gauge 0, the running configuration kept.
	writeFile(t, cfg, "targets:\n  - name: x\n    pathh: /\n")
	sent = time.Now()
	code, _ = post(t, "http://"+e.Addr+"/-/reload")
	if answered := time.Since(sent); code != http.StatusInternalServerError || answered > 2*time.Second {
		t.Errorf("POST /-/reload of a broken file while hung: %d after %s; want 500 within 2s", code, answered)
	}
	f = e.MustScrape()
	if v := value(f, "diskprobe_config_last_reload_successful"); v != 0 {
		t.Errorf("diskprobe_config_last_reload_successful %v after a failed reload", v)
	}
	r0 := runs(f, "a", "fsync")
	time.Sleep(2 * time.Second)
	f = e.MustScrape()
	if runs(f, "a", "fsync") < r0+1 {
		t.Errorf("the other targets stopped while one hung: %.0f → %.0f rounds", r0, runs(f, "a", "fsync"))
	}
	t.Logf("hung target: in-flight %.1fs, %.0f errors; new target on the hung mount: in-flight %.1fs",
		inflight(f, "hung", "fsync"), errs(f, "hung", "fsync"), inflight(f, "late", "fsync"))
	if inflight(f, "hung", "fsync") < time.Since(heldAt).Seconds()-2 {
		t.Errorf("the hung target was restarted by a reload: in-flight %.1fs, hung %s ago", inflight(f, "hung", "fsync"), time.Since(heldAt))
	}

	// Released: both recover by themselves, /-/ready says 200, and a reload works.
	gHung, hungDump := goroutineCount(t, e), getBody(t, e, "/debug/pprof/goroutine?debug=1")
	releasedAt := time.Now()
	h.Release()
	framework.WaitMetric(t, e, 15*time.Second, "rounds on both targets of the released mount", func(f families) bool {
		after := float64(releasedAt.UnixNano()) / 1e9
		return lastSuccess(f, "hung", "fsync") > after && lastSuccess(f, "late", "fsync") > after
	})
	if code := getStatus(t, e, "/-/ready"); code != http.StatusOK {
		t.Errorf("/-/ready %d after the release; want 200", code)
	}
	obs := w.Stop()
	worstScrape(t, between(obs, heldAt, releasedAt), "a target hung through three reloads")
	t.Logf("goroutines: %d before the hang, %d after three reloads while hung, 2 targets added", g0, gHung)
	// Per added target 2 (its schedule loop and worker); per target on the hung mount at
	// most 1 (the stuck call), whatever the number of reloads; one more allowed, for a
	// goroutine that comes and goes.
	if gHung > g0+2*2+1+1 {
		t.Errorf("goroutines grew while hung: %d before, %d after the reloads:\n%s", g0, gHung, hungDump)
	}
	writeFile(t, cfg, "targets:\n"+target("hung", h.Dir, 2)+target("a", d["a"], 3))
	if code, body := post(t, "http://"+e.Addr+"/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload after the release: %d %q", code, body)
	}
	f = e.MustScrape()
	if _, ok := framework.Value(f, "diskprobe_probe_runs_total", map[string]string{"target": "late"}); ok {
		t.Errorf("the removed target's series are still exported")
	}
	if v := value(f, "diskprobe_config_last_reload_successful"); v != 1 {
		t.Errorf("diskprobe_config_last_reload_successful %v after a good reload", v)
	}

	// SIGHUP with a new target on a hung mount, then SIGTERM at once: the reload in flight
	// does not keep the process from exiting.
	h.Hang()
	writeFile(t, cfg, "targets:\n"+target("hung", h.Dir, 2)+target("a", d["a"], 3)+target("late", late, 2))
	e.Signal(syscall.SIGHUP)
	time.Sleep(100 * time.Millisecond)
	if exited, _ := exitAfterSIGTERM(t, e); exited > 5*time.Second {
		t.Errorf("exited %s after SIGTERM during a reload of a hung target; want within 5s", exited)
	}
}

// TestConfigCheckOnAHungPathNamesIt: --config.check used to stat every path and wait
// forever on a hung mount. It gives up after a bounded wait, exits 1, and names the
// file, line, field and path.
func TestConfigCheckOnAHungPathNamesIt(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	steady := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: steady
    path: %s
  - name: hung
    path: %s
`, steady, h.Dir))
	bin := testenv.Binary(t)
	h.Hang()
	start := time.Now()
	p := testenv.StartProcess(t, bin, "--config.file="+cfg, "--config.check")
	t.Cleanup(h.Release) // before StartProcess's cleanup waits for it
	if !p.WaitExit(15 * time.Second) {
		t.Fatalf("--config.check still running 15s after it started on a hung path")
	}
	t.Logf("--config.check on a hung path exited after %s: %s", fmtDur(time.Since(start)), p.Output())
	out := p.Output()
	h.Release()
	if code := p.ExitCode(10 * time.Second); code != 1 {
		t.Errorf("exit status %d; want 1", code)
	}
	want := filepath.Base(cfg) + ":5: targets[1].path: " + h.Dir + " did not answer within 5s"
	if !strings.Contains(out, want) {
		t.Errorf("the error does not name the path: %q; want %q", out, want)
	}
	if strings.Contains(out, "targets[0]") {
		t.Errorf("the healthy target is reported too: %q", out)
	}
}
