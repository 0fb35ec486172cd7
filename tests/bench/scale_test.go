package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// daemon is a long-running process of the scale phase, killed by its pid in cleanup.
type daemon struct {
	cmd  *exec.Cmd
	addr string
	log  *testenv.SyncBuffer
	done chan struct{}
}

func startDaemon(t *testing.T, readyPath string, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{addr: framework.FreePort(t), log: &testenv.SyncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, append(args, "--web.listen-address="+d.addr)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", bin, d.log.String())
		}
	})
	testenv.WaitFor(t, 20*time.Second, bin+" ready", func() bool {
		select {
		case <-d.done:
			t.Fatalf("%s exited: %v\n%s", bin, d.cmd.ProcessState, d.log.String())
		default:
		}
		resp, err := http.Get("http://" + d.addr + readyPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

// stop kills the process and waits for it.
func (d *daemon) stop() {
	d.cmd.Process.Kill()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
	}
}

var scrapeClient = &http.Client{Timeout: 30 * time.Second}

// scrape times one GET /metrics, body read in full.
func scrape(addr string) (time.Duration, []byte, error) {
	start := time.Now()
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return d, body, err
}

// seriesIn counts the sample lines of a text exposition.
func seriesIn(body []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && line[0] != '#' {
			n++
		}
	}
	return n
}

// targetSeriesIn counts the sample lines of a text exposition that carry a target label.
func targetSeriesIn(body []byte) int {
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && line[0] != '#' && strings.Contains(line, `target="`) {
			n++
		}
	}
	return n
}

// sumOf sums every sample of a counter or gauge family, optionally with one label set.
func sumOf(body []byte, name string, label, value string) float64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// histogramSum sums the _sum of every histogram of a family.
func histogramSum(body []byte, name string) float64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// memory is VmRSS and VmHWM of a process in bytes.
func memory(pid int) (rss, hwm int64) {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

func stats(t *testing.T, dev string) device.Stats {
	t.Helper()
	s, err := device.Paths{}.ReadStats(filepath.Base(dev))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// measureScale runs the default-config exporter (disk budget, memory at 1 target) and
// a 64-target exporter (scrape cost, memory) side by side for window, with Debian's
// node_exporter beside them for the scrape comparison.
func measureScale(t *testing.T, window time.Duration) *benchkit.Scale {
	bin := testenv.Binary(t)
	nodeBin, err := exec.LookPath("prometheus-node-exporter")
	if err != nil {
		t.Fatal(err)
	}
	s := &benchkit.Scale{Window: window, BaselineWindow: 10 * time.Second}

	// The default configuration on an otherwise idle ext4 (1 GiB min_free + 320 MiB of files).
	devA, mntA := testenv.LoopExt4(t, 3<<30)
	dataA := filepath.Join(mntA, "data")
	if err := os.Mkdir(dataA, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := probe.NewReadFile(dataA, 256<<20, 0, 0) // the default randread file_size
	if err != nil {
		t.Fatal(err)
	}
	if err := benchkit.Prepare(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	s.ConfigDefault = "targets:\n  - name: data\n    path: " + dataA + "   # no probe keys: the defaults of a directory\n"
	cfgA := framework.WriteConfig(t, s.ConfigDefault)
	s.Device = fmt.Sprintf("%s (3 GiB sparse image, ext4)", devA)

	var cfgB string
	s.Config64, cfgB = config64(t)

	s.NodeCommand = nodeBin + " --web.listen-address=127.0.0.1:PORT"
	node := startDaemon(t, "/metrics", nodeBin)

	before := stats(t, devA)
	time.Sleep(s.BaselineWindow)
	after := stats(t, devA)
	s.Baseline = after.IOTicks - before.IOTicks

	before = stats(t, devA)
	start := time.Now()
	expA := startDaemon(t, "/-/ready", bin, "--config.file="+cfgA, "--log.level=info")
	expB := startDaemon(t, "/-/ready", bin, "--config.file="+cfgB, "--log.level=info")

	warm := start.Add(30 * time.Second)
	for i := 0; time.Since(start) < window; i++ {
		time.Sleep(time.Second)
		if time.Now().Before(warm) {
			continue
		}
		order := []*daemon{expB, node, expA}
		order = append(order[i%3:], order[:i%3]...) // rotate who goes first
		for _, d := range order {
			took, body, err := scrape(d.addr)
			if err != nil {
				t.Fatalf("scrape %s: %v", d.addr, err)
			}
			switch d {
			case expB:
				s.ScrapeOurs = append(s.ScrapeOurs, took)
				s.Series, s.BodyBytes, s.TargetSeries = seriesIn(body), len(body), targetSeriesIn(body)
			case expA:
				s.ScrapeDefault = append(s.ScrapeDefault, took)
				s.SeriesDefault, s.BytesDefault, s.TargetSeriesDefault = seriesIn(body), len(body), targetSeriesIn(body)
			default:
				s.ScrapeNode = append(s.ScrapeNode, took)
				s.NodeSeries, s.NodeBytes = seriesIn(body), len(body)
			}
		}
	}
	elapsed := time.Since(start)
	after = stats(t, devA)
	s.RSS1, s.HWM1 = memory(expA.cmd.Process.Pid)
	s.RSS64, s.HWM64 = memory(expB.cmd.Process.Pid)
	_, body, err := scrape(expA.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.Window = elapsed.Round(time.Second)
	s.IOTicks = after.IOTicks - before.IOTicks
	s.DeviceReads = after.ReadIOs - before.ReadIOs
	s.DeviceWrites = after.WriteIOs - before.WriteIOs
	s.DeviceFlushes = after.FlushIOs - before.FlushIOs
	s.DeviceSectorsRW = after.ReadSectors - before.ReadSectors + after.WriteSectors - before.WriteSectors
	s.Load = map[string][2]float64{}
	for _, p := range []string{"fsync", "randread", "seqread"} {
		s.Load[p] = [2]float64{sumOf(body, "diskprobe_probe_io_operations_total", "probe", p), sumOf(body, "diskprobe_probe_io_bytes_total", "probe", p)}
	}
	s.SeqreadRounds = sumOf(body, "diskprobe_probe_runs_total", "probe", "seqread")
	s.IOTime = time.Duration(1e9 * (histogramSum(body, "diskprobe_fdatasync_duration_seconds") + histogramSum(body, "diskprobe_write_duration_seconds") +
		histogramSum(body, "diskprobe_read_duration_seconds") + sumOf(body, "diskprobe_sequential_duration_seconds_total", "", "")))
	if errs := sumOf(body, "diskprobe_probe_errors_total", "", ""); errs > 0 {
		t.Errorf("the default-config exporter counted %v probe errors:\n%s", errs, expA.log.String())
	}
	expA.stop()

	// One seqread round of the default configuration (64 MiB in 1 MiB reads under the
	// default limits), alone on the device: its busy time, which the schedule spends once
	// every 10 minutes whether or not it fell inside the window.
	src, err = probe.NewReadFile(dataA, 256<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := benchkit.Prepare(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	seq, err := probe.NewSeqread(src, 64<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	before = stats(t, devA)
	res, err := seq.Round(context.Background(), &probe.Env{Budget: collector.NewBudget(config.DefaultLimits, 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	after = stats(t, devA)
	s.SeqreadBusy, s.SeqreadIO = after.IOTicks-before.IOTicks, res.IO
	t.Logf("scale: scrape medians 64 targets %v, node_exporter %v, 1 target %v; RSS %d / %d bytes; busy %v in %v, seqread round %v",
		benchkit.MedianDur(s.ScrapeOurs), benchkit.MedianDur(s.ScrapeNode), benchkit.MedianDur(s.ScrapeDefault), s.RSS1, s.RSS64, s.IOTicks, s.Window, s.SeqreadBusy)
	return s
}

// config64 writes the 64-target configuration of the scale phase (fsync and randread,
// short intervals, small files, each target its own directory on one loop ext4) and
// returns it as shown in the report (first target only) and the file's path.
func config64(t *testing.T) (shown, path string) {
	_, mnt := testenv.LoopExt4(t, 2<<30)
	var cfg strings.Builder
	cfg.WriteString("targets:\n")
	for i := range 64 {
		dir := filepath.Join(mnt, fmt.Sprintf("t%02d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		entry := fmt.Sprintf("  - name: t%02d\n    path: %s\n    fsync: {interval: 5s, ops: 5, file_size: 1MiB}\n    randread: {interval: 5s, ops: 5, file_size: 1MiB}\n", i, dir)
		cfg.WriteString(entry)
		if i == 0 {
			shown = "targets:\n" + entry + "  # … t01 to t63 alike, each in its own directory\n"
		}
	}
	return shown, framework.WriteConfig(t, cfg.String())
}
