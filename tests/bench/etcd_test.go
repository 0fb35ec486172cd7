package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// etcdPutRate is the load on etcd, in puts a second: a busy Kubernetes control plane's
// order of magnitude. (Back to back, one client made ~960 puts/s on this machine's disk,
// and the prober's fdatasyncs queued behind etcd's own: a heavier tail than etcd's.)
const etcdPutRate = 100

// measureEtcd runs a single-member etcd (Debian's) on dir with a steady put load while the
// exporter probes the same filesystem from a probe_dir beside etcd's data directory, for
// window; a Prometheus with native histograms scrapes both every second. Then it runs
// `diskprobe_exporter check` and `etcdctl check perf` on the same filesystem. cg, when not
// nil, is the blkio cgroup every process doing I/O joins (the throttled disk).
func measureEtcd(t *testing.T, name, dir, dev string, cg *testenv.Cgroup, window time.Duration, checkSize string) *benchkit.EtcdDisk {
	d := &benchkit.EtcdDisk{Name: name, Device: dev, Window: window, PutRate: etcdPutRate}
	data, beside := filepath.Join(dir, "etcd"), filepath.Join(dir, "diskprobe-etcd")
	if err := os.Mkdir(beside, 0o700); err != nil {
		t.Fatal(err)
	}
	etcd := framework.StartEtcd(t, data, "--quota-backend-bytes=8589934592")
	join := func(pid int) {
		if cg != nil {
			cg.Add(pid)
		}
	}
	join(etcd.Pid())
	// The exporter's default fsync probe (2300 B write + fdatasync into a fallocated 64 MiB
	// file), once a second instead of every 15 s, so that its histogram holds thousands of
	// syncs within the window.
	cfg := framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n    fsync: {interval: 1s}\n", data, beside))
	exp := framework.StartExporter(t, cfg)
	join(exp.Pid())
	prom := framework.StartPrometheus(t, framework.PrometheusOptions{
		Jobs:  map[string]string{"etcd": strings.TrimPrefix(etcd.ClientURL, "http://"), "diskprobe": exp.Addr},
		Flags: []string{"--enable-feature=native-histograms"},
	})
	classic := framework.StartPrometheus(t, framework.PrometheusOptions{Jobs: map[string]string{"diskprobe": exp.Addr}})

	load := startPutLoad(etcd.ClientURL)
	time.Sleep(window + 5*time.Second)
	d.Puts = load.Stop()

	rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
	q := func(p *framework.Prometheus, expr string) float64 {
		v, err := p.Value(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	etcdRate := `sum by (le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket` + rng + `))`
	ourRate := `sum(rate(diskprobe_fdatasync_duration_seconds` + rng + `))`
	d.EtcdSyncs = q(prom, `sum(increase(etcd_disk_wal_fsync_duration_seconds_count`+rng+`))`)
	d.OurSyncs = q(prom, `sum(histogram_count(increase(diskprobe_fdatasync_duration_seconds`+rng+`)))`)
	for _, e := range benchkit.EtcdEdges {
		d.EtcdShares = append(d.EtcdShares, q(prom, fmt.Sprintf(`sum(rate(etcd_disk_wal_fsync_duration_seconds_bucket{le="%g"}%s)) / sum(rate(etcd_disk_wal_fsync_duration_seconds_count%s))`, e, rng, rng)))
		d.OurShares = append(d.OurShares, q(prom, fmt.Sprintf(`histogram_fraction(0, %g, %s)`, e, ourRate)))
	}
	d.EtcdP50 = q(prom, `histogram_quantile(0.5, `+etcdRate+`)`)
	d.EtcdP99 = q(prom, `histogram_quantile(0.99, `+etcdRate+`)`)
	d.OurP50 = q(prom, `histogram_quantile(0.5, `+ourRate+`)`)
	d.OurP99 = q(prom, `histogram_quantile(0.99, `+ourRate+`)`)
	classicRate := `sum by (le) (rate(diskprobe_fdatasync_duration_seconds_bucket` + rng + `))`
	d.OurClassicP50 = q(classic, `histogram_quantile(0.5, `+classicRate+`)`)
	d.OurClassicP99 = q(classic, `histogram_quantile(0.99, `+classicRate+`)`)
	d.EtcdVerdictOK, d.OurVerdictOK = d.EtcdP99 < 0.01, d.OurP99 < 0.01
	t.Logf("%s: etcd %.0f syncs p50 %s p99 %s; ours %.0f syncs p50 %s p99 %s (classic %s, %s); %d puts",
		name, d.EtcdSyncs, benchkit.Dur(d.EtcdP50*1e9), benchkit.Dur(d.EtcdP99*1e9), d.OurSyncs, benchkit.Dur(d.OurP50*1e9), benchkit.Dur(d.OurP99*1e9), benchkit.Dur(d.OurClassicP50*1e9), benchkit.Dur(d.OurClassicP99*1e9), d.Puts)
	exp.Signal(15)
	<-exp.Done()

	// The one-shot verdicts on the same filesystem, one after the other, nothing else running.
	bin := testenv.Binary(t)
	// The WAL's job alone: etcdctl check perf judges the WAL's fsyncs; the commit job is
	// compared with etcd's backend_commit in commit_test.go.
	d.CheckCommand = fmt.Sprintf("diskprobe_exporter check --probes=fsync --size=%s --probe-dir=%s %s", checkSize, beside, data)
	d.CheckTime, d.CheckIO, d.CheckVerdict = timedOnDevice(t, dev, cg, bin, "check", "--probes=fsync", "--size="+checkSize, "--probe-dir="+beside, data)
	d.CheckPerfCmd = "etcdctl check perf --load=s"
	d.CheckPerfTime, d.CheckPerfIO, d.CheckPerfResult = timedOnDevice(t, dev, nil, "etcdctl", "--endpoints="+etcd.ClientURL, "check", "perf", "--load=s")
	t.Logf("%s: check %s in %v; etcdctl check perf %s in %v", name, d.CheckVerdict, d.CheckTime, d.CheckPerfResult, d.CheckPerfTime)
	etcd.Stop()
	return d
}

// timedOnDevice runs a command (in cg when not nil) and returns its wall time, what the
// device saw meanwhile, and its verdict line (PASS/FAIL, or etcdctl's last line).
func timedOnDevice(t *testing.T, dev string, cg *testenv.Cgroup, name string, args ...string) (time.Duration, benchkit.DiskIO, string) {
	t.Helper()
	before := stats(t, dev)
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cg != nil {
		cg.Add(cmd.Process.Pid)
	}
	cmd.Wait() // a FAIL verdict exits non-zero: the output says which
	took := time.Since(start)
	after := stats(t, dev)
	io := benchkit.DiskIO{Writes: after.WriteIOs - before.WriteIOs, Flushes: after.FlushIOs - before.FlushIOs,
		WrittenBytes: (after.WriteSectors - before.WriteSectors) * 512}
	return took, io, verdictLine(out.String())
}

// verdictLine is the line of a check's output that gives its verdict.
func verdictLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

func etcdPut(url, key, value string) error {
	body, _ := json.Marshal(map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value))})
	resp, err := http.Post(url+"/v3/kv/put", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("put: %s", resp.Status)
	}
	return nil
}

// measureEtcdDisks compares on this machine's disk (dir) and on a loop ext4 throttled to
// 20 write IOPS.
func measureEtcdDisks(t *testing.T, dir string, window time.Duration) []*benchkit.EtcdDisk {
	testenv.RequireTools(t, "etcd", "etcdctl", "prometheus")
	hostDir, err := os.MkdirTemp(dir, "etcd-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	hostDev, err := device.Paths{}.Resolve(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	healthy := measureEtcd(t, "this machine's disk ("+dir+")", hostDir, hostDev.Disk, nil, window, "22MiB")

	dev, mnt := testenv.LoopExt4(t, 2<<30)
	cg := testenv.ThrottleWrites(t, dev, 20)
	throttled := measureEtcd(t, "loop ext4 throttled to 20 write IOPS", mnt, filepath.Base(dev), cg, window, "1MiB")
	return []*benchkit.EtcdDisk{healthy, throttled}
}

// TestEtcdAgreement runs only the etcd comparison of make bench (DISKPROBE_BENCH_ETCD=1;
// root) and logs its figures; with DISKPROBE_BENCH_REPORT it rewrites that report's etcd
// section.
func TestEtcdAgreement(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_ETCD") == "" {
		t.Skip("set DISKPROBE_BENCH_ETCD=1 to run the comparison with a live etcd alone")
	}
	testenv.RequireRoot(t)
	dir := benchDir(t)
	rep := &benchkit.Report{Date: time.Now(), Machine: machine(t, dir)}
	rep.Etcd = measureEtcdDisks(t, dir, 3*time.Minute)
	for _, d := range rep.Etcd {
		t.Logf("%+v", *d)
	}
	spliceReport(t, "etcd", rep.SpliceEtcd)
}

// spliceReport rewrites one section of the report named by DISKPROBE_BENCH_REPORT, when
// set, with splice: a part of make bench run alone.
func spliceReport(t *testing.T, section string, splice func(doc string) (string, error)) {
	out := os.Getenv(reportEnv)
	if out == "" {
		return
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	spliced, err := splice(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(spliced), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote the %s section of %s", section, out)
}

// putLoad is one client putting 1 KiB values into etcd at up to etcdPutRate a second, each
// a WAL write and fsync and, batched, a backend commit; a slow disk holds it back, as it
// would a real cluster.
type putLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	puts atomic.Int64
}

func startPutLoad(url string) *putLoad {
	l := &putLoad{stop: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		value := strings.Repeat("x", 1024)
		tick := time.NewTicker(time.Second / etcdPutRate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			if etcdPut(url, fmt.Sprintf("bench/%d", i%1000), value) == nil {
				l.puts.Add(1)
			}
		}
	}()
	return l
}

// Puts is how many puts have succeeded so far.
func (l *putLoad) Puts() int64 { return l.puts.Load() }

// Stop ends the load and returns how many puts succeeded.
func (l *putLoad) Stop() int64 {
	close(l.stop)
	l.wg.Wait()
	return l.puts.Load()
}
