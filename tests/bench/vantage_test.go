package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
)

// vantagePutRate is the put load on etcd in the vantage comparison: enough to keep a
// cgroup capped at 100 write IOPS at its cap (a put costs etcd about two writes).
const vantagePutRate = 60

const (
	vantageBegin = "<!-- vantage section: make bench, or TestVantageAgreement alone, rewrites it -->"
	vantageEnd   = "<!-- end of vantage section -->"
)

// vantageFigures are one window of the vantage comparison, seconds.
type vantageFigures struct {
	Window                     time.Duration
	Puts                       int64
	EtcdSyncs, Inside, Outside float64 // counts
	EtcdP50, EtcdP99           float64
	InsideP50, InsideP99       float64
	OutsideP50, OutsideP99     float64
	PressureWaited             float64 // etcd's cgroup's io.pressure some, over the window
}

func (v vantageFigures) ratio() float64 { return v.InsideP99 / v.EtcdP99 }

// outsideShare is outside's p99 against inside's: a fifth at most for the disk outside the
// capped cgroup to count as fast. Not "under 10 ms": outside's p99 was 11.2 and 19.5 ms
// beside inside's 114 and 138 ms, its p50 0.6 ms, most likely ext4's ordered journal
// making an outside fdatasync wait for capped writes (design.md, "The vantage").
func (v vantageFigures) outsideShare() float64 { return v.OutsideP99 / v.InsideP99 }

// agrees is the agreement method's test: the p99s within ±30 % and on the same side of
// etcd's 10 ms.
func (v vantageFigures) agrees() bool {
	r := v.ratio()
	return r >= 0.7 && r <= 1.3 && (v.InsideP99 < 0.01) == (v.EtcdP99 < 0.01)
}

// TestVantageAgreement: Debian's etcd in a blkio cgroup capped at 100 write IOPS on a loop
// ext4 (the loop device capped for no one else) under a steady put load; one exporter
// probes the disk from its own cgroup (outside) and from etcd's (inside: vantage by
// pid_file), the fsync probe each second as measureEtcd runs it; a Prometheus with native
// histograms scrapes both. The inside fdatasync p99 is set against etcd's own wal_fsync
// p99 by the agreement method of the etcd section (within ±30 %, the same side of 10 ms),
// and the outside p99 must stay a fifth of inside's or less. make bench runs it
// (DISKPROBE_BENCH_VANTAGE=1).
func TestVantageAgreement(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_VANTAGE") == "" {
		t.Skip("set DISKPROBE_BENCH_VANTAGE=1 to run the vantage comparison with a live etcd")
	}
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "etcd", "prometheus")
	window := 3 * time.Minute
	if s := os.Getenv("DISKPROBE_BENCH_VANTAGE_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	dev, fs := testenv.LoopExt4(t, 1<<30)
	capped := testenv.ThrottleWrites(t, dev, 100)
	unified := testenv.UnifiedCgroup(t)
	data := filepath.Join(fs, "etcd")
	for _, d := range []string{"diskprobe-out", "diskprobe-in"} {
		if err := os.Mkdir(filepath.Join(fs, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	etcd := framework.StartEtcd(t, data, "--quota-backend-bytes=8589934592")
	capped.Add(etcd.Pid())
	unified.Add(etcd.Pid())
	pidFile := filepath.Join(t.TempDir(), "etcd.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(etcd.Pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	exp := framework.StartExporter(t, framework.WriteConfig(t, fmt.Sprintf("targets:\n"+
		"  - name: outside\n    path: %[1]s\n    probe_dir: %[2]s/diskprobe-out\n    fsync: {interval: 1s}\n    limits: {min_free: 64MiB}\n"+
		"  - name: inside\n    path: %[1]s\n    probe_dir: %[2]s/diskprobe-in\n    fsync: {interval: 1s}\n    limits: {min_free: 64MiB}\n    vantage: {pid_file: %[3]s, outside: outside}\n",
		data, fs, pidFile)))
	prom := framework.StartPrometheus(t, framework.PrometheusOptions{
		Jobs:  map[string]string{"etcd": strings.TrimPrefix(etcd.ClientURL, "http://"), "diskprobe": exp.Addr},
		Flags: []string{"--enable-feature=native-histograms"},
	})
	load := startPutLoad(etcd.ClientURL)
	time.Sleep(window + 5*time.Second)
	v := vantageFigures{Window: window, Puts: load.Stop()}

	rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
	q := func(expr string) float64 {
		x, err := prom.Value(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return x
	}
	etcdRate := `sum by (le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket` + rng + `))`
	ours := func(target string) string {
		return `sum(rate(diskprobe_fdatasync_duration_seconds{target="` + target + `"}` + rng + `))`
	}
	v.EtcdSyncs = q(`sum(increase(etcd_disk_wal_fsync_duration_seconds_count` + rng + `))`)
	v.Inside = q(`histogram_count(` + strings.Replace(ours("inside"), "rate(", "increase(", 1) + `)`)
	v.Outside = q(`histogram_count(` + strings.Replace(ours("outside"), "rate(", "increase(", 1) + `)`)
	v.EtcdP50, v.EtcdP99 = q(`histogram_quantile(0.5, `+etcdRate+`)`), q(`histogram_quantile(0.99, `+etcdRate+`)`)
	v.InsideP50, v.InsideP99 = q(`histogram_quantile(0.5, `+ours("inside")+`)`), q(`histogram_quantile(0.99, `+ours("inside")+`)`)
	v.OutsideP50, v.OutsideP99 = q(`histogram_quantile(0.5, `+ours("outside")+`)`), q(`histogram_quantile(0.99, `+ours("outside")+`)`)
	v.PressureWaited = q(`increase(diskprobe_vantage_pressure_io_waiting_seconds_total{target="inside"}` + rng + `)`)
	md := v.markdown()
	t.Log("\n" + md)
	if out := os.Getenv(reportEnv); out != "" {
		doc, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(benchkit.SpliceSection(string(doc), vantageBegin, vantageEnd, md)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !v.agrees() {
		t.Errorf("inside fdatasync p99 %s against etcd's wal_fsync p99 %s: %.2f×, want within ±30 %% and the same side of 10 ms", benchkit.Dur(v.InsideP99*1e9), benchkit.Dur(v.EtcdP99*1e9), v.ratio())
	}
	if v.outsideShare() > 0.2 {
		t.Errorf("outside fdatasync p99 %s against inside's %s: the disk outside etcd's cgroup is not capped and should be five times faster at least", benchkit.Dur(v.OutsideP99*1e9), benchkit.Dur(v.InsideP99*1e9))
	}
}

func (v vantageFigures) markdown() string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	met := map[bool]string{true: "met", false: "NOT met"}
	w("\n%s\n## The vantage: a probe inside etcd's capped cgroup against etcd's own wal_fsync\n<a id=\"vantage\"></a>\n\n", vantageBegin)
	w("Debian's etcd in a blkio cgroup (v1) capped at 100 write IOPS on a loop ext4 that is capped for no\n")
	w("one else, under %d puts/s of 1 KiB (%d puts in the window); one exporter probes the disk twice, the\n", vantagePutRate, v.Puts)
	w("fsync probe each second (20 write+fdatasync of 2300 B), from its own cgroup (`outside`) and from\n")
	w("etcd's cgroup and I/O class (`inside`, `vantage: {pid_file: …}`). A Prometheus with native histograms\n")
	w("scrapes both over a %s window.\n\n", v.Window)
	w("| | syncs | p50 | p99 |\n|---|---|---|---|\n")
	w("| etcd `wal_fsync` | %.0f | %s | %s |\n", v.EtcdSyncs, benchkit.Dur(v.EtcdP50*1e9), benchkit.Dur(v.EtcdP99*1e9))
	w("| inside `fdatasync` | %.0f | %s | %s |\n", v.Inside, benchkit.Dur(v.InsideP50*1e9), benchkit.Dur(v.InsideP99*1e9))
	w("| outside `fdatasync` | %.0f | %s | %s |\n\n", v.Outside, benchkit.Dur(v.OutsideP50*1e9), benchkit.Dur(v.OutsideP99*1e9))
	w("| figure | value | goal | |\n|---|---|---|---|\n")
	w("| inside p99 against etcd's wal_fsync p99 | %.2f× | within ±30 %%, the same side of 10 ms | %s |\n", v.ratio(), met[v.agrees()])
	w("| outside p99 against inside's | %.2f× | a fifth or less | %s |\n", v.outsideShare(), met[v.outsideShare() <= 0.2])
	w("| etcd's cgroup io.pressure (some) over the window | %.1f s | rises | %s |\n\n", v.PressureWaited, met[v.PressureWaited > 0])
	w("The outside p99 is %s: ", benchkit.Dur(v.OutsideP99*1e9))
	if v.OutsideP99 >= 0.01 {
		w("over etcd's 10 ms although nothing caps it; its median is %s. Most likely ext4's ordered\n", benchkit.Dur(v.OutsideP50*1e9))
		w("mode: an fdatasync that needs a journal commit waits for the data the commit orders, here etcd's\n")
		w("capped writes, so the cap leaks into the tail of a writer outside it ([design.md](../design.md#the-vantage)).\n")
	} else {
		w("under etcd's 10 ms.\n")
	}
	w("Command: `DISKPROBE_BENCH_VANTAGE=1 go -C tests test ./bench -run '^TestVantageAgreement$' -count=1 -v`\n")
	w("%s\n", vantageEnd)
	return b.String()
}
