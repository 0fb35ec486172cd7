package integration

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// contractBuckets are the classic bucket edges of the fdatasync and read histograms, as
// docs/metrics.md lists them, copied here so that a change to collector.LatencyBuckets cannot
// pass unnoticed: rules and dashboards select on these `le` values. (The design once had 18
// edges for all three histograms; they were cut to these, and the write histogram to
// native buckets only, to halve the series per target: see docs/design.md, "The metric
// contract".)
var contractBuckets = []float64{0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1}

// commitContractBuckets are the commit histogram's, as docs/metrics.md lists them: the
// contract's and 250 ms, the etcd-mixin's etcdHighCommitDurations line that
// DiskprobeCommitP99Critical counts commits over.
var commitContractBuckets = []float64{0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.25, 0.5, 1}

// histogramBuckets are the classic edges each latency histogram exposes.
var histogramBuckets = map[string][]float64{
	"diskprobe_fdatasync_duration_seconds": contractBuckets,
	"diskprobe_write_duration_seconds":     nil,
	"diskprobe_read_duration_seconds":      contractBuckets,
}

var latencyHistograms = []string{
	"diskprobe_fdatasync_duration_seconds",
	"diskprobe_write_duration_seconds",
	"diskprobe_read_duration_seconds",
}

// fsyncAndRandread is a light configuration on a temporary directory.
func fsyncAndRandread(t *testing.T, extra string) string {
	return framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: tmp
    path: %s
    fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
    randread: {interval: 1s, ops: 5, file_size: 1MiB}
    limits:   {min_free: 1MiB}
%s`, t.TempDir(), extra))
}

func TestFdatasyncSamplesAccumulateInTheContractBuckets(t *testing.T) {
	e := framework.StartExporter(t, fsyncAndRandread(t, ""))
	f := framework.WaitMetric(t, e, 15*time.Second, "fdatasync samples", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp") > 0
	})
	first := metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp")
	f = framework.WaitMetric(t, e, 15*time.Second, "more fdatasync, write and read samples", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp") >= first+10 &&
			metric(f, "diskprobe_write_duration_seconds", "target", "tmp") >= first+10 &&
			metric(f, "diskprobe_read_duration_seconds", "target", "tmp") >= 10
	})
	noErrors(t, f, "tmp", "fsync", "randread")
	if w, s := metric(f, "diskprobe_write_duration_seconds", "target", "tmp"), metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp"); w != s {
		t.Errorf("%v writes but %v fdatasyncs: each write of the fsync probe is followed by one fdatasync", w, s)
	}

	if !slices.Equal(collector.LatencyBuckets, contractBuckets) {
		t.Errorf("collector.LatencyBuckets = %v, docs/metrics.md lists %v", collector.LatencyBuckets, contractBuckets)
	}
	if !slices.Equal(collector.CommitBuckets, commitContractBuckets) {
		t.Errorf("collector.CommitBuckets = %v, docs/metrics.md lists %v", collector.CommitBuckets, commitContractBuckets)
	}
	for _, name := range latencyHistograms {
		fam, ok := f[name]
		if !ok || len(fam.GetMetric()) == 0 {
			t.Errorf("%s not exposed", name)
			continue
		}
		h := fam.GetMetric()[0].GetHistogram()
		var edges []float64
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), +1) { // the text format lists +Inf, protobuf does not
				edges = append(edges, b.GetUpperBound())
			}
		}
		if !slices.Equal(edges, histogramBuckets[name]) {
			t.Errorf("%s has bucket edges %v; docs/metrics.md lists %v", name, edges, histogramBuckets[name])
		}
		if n := len(h.GetBucket()); n > 0 && h.GetBucket()[n-1].GetCumulativeCount() > h.GetSampleCount() {
			t.Errorf("%s: last bucket counts more than the histogram", name)
		}
	}
}

// scrapeProtobuf fetches /metrics in the delimited protobuf format, the only one that
// carries native histograms, and decodes it with expfmt.
func scrapeProtobuf(t *testing.T, e *framework.Exporter) families {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.Addr+"/metrics", nil)
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	format := expfmt.ResponseFormat(resp.Header)
	if format.FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("asked for delimited protobuf, got Content-Type %q", resp.Header.Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(resp.Body, format)
	out := families{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out[mf.GetName()] = mf
	}
}

func TestNativeHistogramsServedOverProtobuf(t *testing.T) {
	e := framework.StartExporter(t, fsyncAndRandread(t, ""))
	framework.WaitMetric(t, e, 15*time.Second, "fdatasync and read samples", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp") >= 5 &&
			metric(f, "diskprobe_read_duration_seconds", "target", "tmp") >= 5
	})
	f := scrapeProtobuf(t, e)
	for _, name := range latencyHistograms {
		fam, ok := f[name]
		if !ok || len(fam.GetMetric()) == 0 {
			t.Errorf("%s missing from the protobuf scrape", name)
			continue
		}
		h := fam.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() == 0 {
			t.Errorf("%s: no samples", name)
			continue
		}
		// Factor 1.1 is schema 3: buckets grow by 2^(2^-3) ≈ 1.09.
		if h.Schema == nil || h.GetSchema() != 3 {
			t.Errorf("%s: native histogram schema %v, want 3 (bucket factor %v)", name, h.Schema, collector.NativeBucketFactor)
		}
		if len(h.GetPositiveSpan()) == 0 {
			t.Errorf("%s: %d samples but no native buckets (spans)", name, h.GetSampleCount())
		}
		if len(h.GetBucket()) != len(histogramBuckets[name]) {
			t.Errorf("%s: %d classic buckets next to the native ones, want %d", name, len(h.GetBucket()), len(histogramBuckets[name]))
		}
		// Positive deltas are bucket-to-bucket differences of the counts.
		counts := int64(0)
		total := h.GetZeroCount()
		for _, d := range h.GetPositiveDelta() {
			counts += d
			total += uint64(counts)
		}
		if total != h.GetSampleCount() {
			t.Errorf("%s: native buckets hold %d samples, the histogram %d", name, total, h.GetSampleCount())
		}
	}
}

// opsPoint is the fsync probe's operations as seen by one scrape, timed before and after.
type opsPoint struct {
	from, at     time.Time
	syncs, ioOps float64
}

func TestProberOperationRateHeldToIOPSLimit(t *testing.T) {
	const (
		iops  = 20
		burst = 2 // iops/10
		ops   = 40
	)
	// 40 write+fdatasync pairs due every second is twice what limits.iops allows; a round
	// takes ~2 s under the limit, and without it well under one.
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: tmp
    path: %s
    fsync:  {interval: 1s, ops: %d, file_size: 4MiB}
    limits: {iops: %d, min_free: 1MiB}
`, t.TempDir(), ops, iops))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 15*time.Second, "the first fdatasync", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp") > 0
	})
	var points []opsPoint
	for start := time.Now(); time.Since(start) < 8*time.Second; time.Sleep(100 * time.Millisecond) {
		from := time.Now()
		f := e.MustScrape()
		points = append(points, opsPoint{from, time.Now(),
			metric(f, "diskprobe_fdatasync_duration_seconds", "target", "tmp"),
			metric(f, "diskprobe_probe_io_operations_total", "target", "tmp", "probe", "fsync")})
	}
	first, last := points[0], points[len(points)-1]
	window := last.at.Sub(first.at).Seconds()
	rate := (last.syncs - first.syncs) / window
	t.Logf("%v fdatasyncs in %.1fs: %.1f/s (limits.iops %d, %d per round asked every second)", last.syncs-first.syncs, window, rate, iops, ops)
	if rate < iops/2 {
		t.Fatalf("only %.1f operations/s: the probe did not run into the limit, the test proves nothing", rate)
	}

	// Every window of a second or more: at most iops × window + the burst, and one more
	// for an operation allowed just before the window whose fdatasync ended inside it.
	// Windows are taken at their longest, from before one scrape to after the other.
	for i := range points {
		for j := i + 1; j < len(points); j++ {
			w := points[j].at.Sub(points[i].from).Seconds()
			if w < 1 {
				continue
			}
			if n := points[j].syncs - points[i].syncs; n > iops*w+burst+1 {
				t.Fatalf("%v operations in %.2fs, over limits.iops %d plus a burst of %d", n, w, iops, burst)
			}
		}
	}

	// diskprobe_probe_io_operations_total moves at the end of each round, by the round's
	// operations, all done after the previous round ended: the same bound holds between
	// round ends. Each end happened after the scrape before the one that saw it began.
	var ends []opsPoint
	for i := 1; i < len(points); i++ {
		if p := points[i]; p.ioOps != points[i-1].ioOps {
			p.from = points[i-1].from
			ends = append(ends, p)
		}
	}
	if len(ends) < 2 {
		t.Fatalf("diskprobe_probe_io_operations_total moved %d times in %.1fs: %v", len(ends), window, ends)
	}
	for i := 1; i < len(ends); i++ {
		w := ends[i].at.Sub(ends[0].from).Seconds()
		if n := ends[i].ioOps - ends[0].ioOps; n > iops*w+burst+1 {
			t.Errorf("diskprobe_probe_io_operations_total rose by %v in %.2fs, over limits.iops %d plus a burst of %d", n, w, iops, burst)
		}
		if ends[i].ioOps-ends[i-1].ioOps != ops {
			t.Errorf("a round added %v to diskprobe_probe_io_operations_total, want its %d operations", ends[i].ioOps-ends[i-1].ioOps, ops)
		}
	}
	if last.ioOps > last.syncs {
		t.Errorf("diskprobe_probe_io_operations_total %v exceeds the %v fdatasyncs done", last.ioOps, last.syncs)
	}
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func TestHTTPEndpoints(t *testing.T) {
	e := framework.StartExporter(t, fsyncAndRandread(t, ""))
	base := "http://" + e.Addr
	for _, c := range []struct {
		path, want string
	}{
		{"/-/healthy", "Healthy"},
		{"/-/ready", "Ready"},
		{"/", `href="/metrics"`},
		{"/metrics", "diskprobe_exporter_build_info"},
	} {
		code, _, body := get(t, base+c.path)
		if code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, body without %q:\n%.300s", c.path, code, c.want, body)
		}
	}
	if code, ctype, body := get(t, base+"/"); !strings.HasPrefix(ctype, "text/html") || !strings.Contains(body, "diskprobe_exporter") {
		t.Errorf("landing page: %d %s, does not name the exporter:\n%.300s", code, ctype, body)
	}
	if code, _, _ := get(t, base+"/no-such-page"); code != http.StatusNotFound {
		t.Errorf("GET /no-such-page: %d, want 404", code)
	}
	f := e.MustScrape()
	if v := metric(f, "diskprobe_config_last_reload_successful"); v != 1 {
		t.Errorf("diskprobe_config_last_reload_successful = %v after a good start", v)
	}
	if v := metric(f, "diskprobe_config_last_reload_success_timestamp_seconds"); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("diskprobe_config_last_reload_success_timestamp_seconds = %v, not the start time", v)
	}
}

// TestLandingPageLinksOnlyWhatAnswers follows every link of the landing page, with and
// without --web.enable-pprof: a page that offers a profile the exporter does not serve
// (as it did, answering 404) sends an operator debugging a slow exporter nowhere.
func TestLandingPageLinksOnlyWhatAnswers(t *testing.T) {
	href := regexp.MustCompile(`href="([^"]+)"`)
	for _, c := range []struct {
		name  string
		args  []string
		pprof bool
	}{{"default", nil, false}, {"--web.enable-pprof", []string{"--web.enable-pprof"}, true}} {
		t.Run(c.name, func(t *testing.T) {
			e := framework.StartExporterWith(t, fsyncAndRandread(t, ""), framework.ExporterOptions{Args: c.args})
			base := "http://" + e.Addr + "/"
			code, _, page := get(t, base)
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			var links []string
			for _, m := range href.FindAllStringSubmatch(page, -1) {
				if !strings.Contains(m[1], "://") { // the page also links pprof.me and the docs
					links = append(links, m[1])
				}
			}
			offersProfile := strings.Contains(page, "debug/pprof/")
			if offersProfile != c.pprof {
				t.Fatalf("landing page offers profiles: %v, want %v\n%s", offersProfile, c.pprof, page)
			}
			if len(links) < 3 {
				t.Fatalf("only %d links on the landing page: %v", len(links), links)
			}
			for _, l := range links {
				// The page offers a 60 s CPU profile; one second shows it is served.
				l = strings.Replace(l, "seconds=60", "seconds=1", 1)
				resp, err := http.Get(base + strings.TrimPrefix(l, "/"))
				if err != nil {
					t.Errorf("%s: %v", l, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || len(body) == 0 {
					t.Errorf("the landing page links %s, which answers %d with %d bytes", l, resp.StatusCode, len(body))
				}
			}
			if !c.pprof {
				resp, err := http.Get(base + "debug/pprof/heap")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("/debug/pprof/heap answers %d without --web.enable-pprof, want 404", resp.StatusCode)
				}
			}
			t.Logf("%d links answer 200: %v", len(links), links)
		})
	}
}

func TestConfigCheckPrintsOneLineSummaryAndExitCode(t *testing.T) {
	dir, wal := t.TempDir(), t.TempDir()
	good := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    fsync: {}
    randread: {}
  - name: wal
    path: %s
    fsync: {}
`, dir, wal))
	code, stdout, stderr := configCheck(t, good)
	if code != 0 {
		t.Fatalf("--config.check on a good config: exit %d\n%s%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "2 targets, 3 probes") || !strings.Contains(lines[0], "etcd") || !strings.Contains(lines[0], "wal") {
		t.Errorf("--config.check summary: %q; want one line naming 2 targets, 3 probes, etcd and wal", stdout)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, ".diskprobe", "*")); len(files) != 0 {
		t.Errorf("--config.check created probe files: %v", files)
	}

	bad := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    fsyncc: {}
`, dir))
	code, stdout, stderr = configCheck(t, bad)
	if code == 0 {
		t.Errorf("--config.check on an unknown field: exit 0\n%s", stdout)
	}
	if want := `diskprobe.yml:4: targets[0]: unknown field "fsyncc"`; !strings.Contains(stderr, want) {
		t.Errorf("--config.check on an unknown field said %q, want %q", stderr, want)
	}

	code, _, stderr = configCheck(t, filepath.Join(t.TempDir(), "missing.yml"))
	if code == 0 || !strings.Contains(stderr, "missing.yml") {
		t.Errorf("--config.check on a missing file: exit %d, %q", code, stderr)
	}
}

// TestVersionFromLinkerFlags builds the binary the way `make build` does, with the
// version injected into prometheus/common/version, and checks that --version and
// diskprobe_exporter_build_info report it.
func TestVersionFromLinkerFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "diskprobe_exporter")
	const pkg = "github.com/prometheus/common/version"
	build := exec.Command("go", "build", "-o", bin, "-ldflags",
		"-X "+pkg+".Version=9.8.7 -X "+pkg+".Revision=abc123 -X "+pkg+".Branch=testbranch",
		"github.com/diskprobe/diskprobe_exporter/cmd/diskprobe_exporter")
	build.Dir = testenv.RepoPath() // the daemon's module, as make build runs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	for _, want := range []string{"diskprobe_exporter, version 9.8.7", "branch: testbranch", "revision: abc123"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version printed:\n%s\nwant %q", out, want)
		}
	}
	addr := framework.FreePort(t)
	cmd := exec.Command(bin, "--config.file="+fsyncAndRandread(t, ""), "--web.listen-address="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	var body string
	testenv.WaitFor(t, 10*time.Second, "/metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	if !strings.Contains(body, `diskprobe_exporter_build_info{branch="testbranch",goarch=`) || !strings.Contains(body, `version="9.8.7"`) {
		t.Errorf("diskprobe_exporter_build_info does not carry the injected version:\n%s", grepLines(body, "build_info"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
