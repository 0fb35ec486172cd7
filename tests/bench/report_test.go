package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"bufio"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// reportEnv names the file TestBenchReport rewrites (make bench sets it to BENCHMARKS.md).
const reportEnv = "DISKPROBE_BENCH_REPORT"

// TestBenchReport is the whole suite behind BENCHMARKS.md: agreement with fio, CPU per
// operation, the Go benchmarks of the hot paths, and the daemon at scale (scrape cost,
// memory, disk budget). It runs only when asked (make bench): it takes ~15 minutes and
// needs root, fio and Debian's prometheus-node-exporter.
//
// DISKPROBE_BENCH_DIR: directory on a disk for cases (a), (c), (d) (default /var/tmp);
// DISKPROBE_BENCH_ROUNDS: rounds of every agreement case (default 11, 5, 9, 25; at least 3);
// DISKPROBE_BENCH_WINDOW: duration of the scale phase (default 5m).
func TestBenchReport(t *testing.T) {
	out := os.Getenv(reportEnv)
	if out == "" {
		t.Skip("set " + reportEnv + "=path/to/BENCHMARKS.md (make bench) to run the benchmark suite")
	}
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio", "prometheus-node-exporter", "prometheus", "etcd", "etcdctl", "findmnt", "go")
	start := time.Now()
	rounds := envInt(t, "DISKPROBE_BENCH_ROUNDS", 0)
	if rounds != 0 && rounds < 3 {
		t.Fatalf("DISKPROBE_BENCH_ROUNDS=%d: at least 3 rounds", rounds)
	}
	pick := func(def int) int {
		if rounds > 0 {
			return rounds
		}
		return def
	}
	window := 5 * time.Minute
	if w := os.Getenv("DISKPROBE_BENCH_WINDOW"); w != "" {
		var err error
		if window, err = time.ParseDuration(w); err != nil {
			t.Fatal(err)
		}
	}
	dir := benchDir(t)
	rep := &benchkit.Report{Date: start, PlotsDir: "tests/bench/plots",
		Command: "make bench (as root): DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestBenchReport$' -count=1 -v -timeout 60m; then (cd tests/bench/plot && go run . -in ../plots/cdf.json -out ../plots)"}
	rep.Machine = machine(t, dir)

	ok := t.Run("agreement", func(t *testing.T) {
		rep.Cases = append(rep.Cases, fsyncCase(t, "fsync", "(a) fdatasync, 2300 B writes, fallocated file (the etcd recipe)", dir, "", "22m", pick(11)))
		rep.Cases = append(rep.Cases, throttledCase(t, pick(5)))
		fioFile := readFiles(t, dir)
		rep.Cases = append(rep.Cases, randreadCase(t, dir, fioFile, pick(9)), seqreadCase(t, dir, fioFile, pick(25)))
	})
	if !ok {
		t.FailNow()
	}
	rep.CPU = []*benchkit.CPUFigure{cpuFigure("write+fdatasync operations", rep.Cases[0]), cpuFigure("4 KiB random reads", rep.Cases[2])}

	ok = t.Run("hotpaths", func(t *testing.T) { rep.Hot, rep.ScrapeServing = hotPaths(t, dir), scrapeServing(t) })
	ok = ok && t.Run("scale", func(t *testing.T) { rep.Scale = measureScale(t, window) })
	ok = ok && t.Run("prometheus", func(t *testing.T) { rep.PromScrape = measurePrometheusScrape(t, 80*time.Second) })
	ok = ok && t.Run("queue", func(t *testing.T) { rep.Queue = measureQueue(t) })
	ok = ok && t.Run("etcd", func(t *testing.T) { rep.Etcd = measureEtcdDisks(t, dir, 3*time.Minute) })
	ok = ok && t.Run("commit", func(t *testing.T) { rep.Commit = measureCommit(t, dir, 3*time.Minute) })
	if !ok {
		t.FailNow()
	}
	rep.Elapsed = time.Since(start)

	root := filepath.Dir(out)
	plots := filepath.Join(root, rep.PlotsDir)
	if err := os.MkdirAll(plots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rep.WritePlotData(filepath.Join(plots, "cdf.json")); err != nil {
		t.Fatal(err)
	}
	// The sections other tests write (rule scale, live alert, replay, e2e timing) stay.
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(benchkit.KeepSections(string(old), rep.Markdown())), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s and %s", out, filepath.Join(plots, "cdf.json"))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// hotPaths runs the Go benchmarks of this package and parses their output.
func hotPaths(t *testing.T, dir string) *benchkit.HotPaths {
	return goBench(t, "tests", "./bench", []string{"DISKPROBE_BENCH_DIR=" + dir, reportEnv + "="},
		"-run", "^$", "-bench", ".", "-benchmem", "-benchtime", "2s", "-count", "1")
}

// scrapeServing runs collector's BenchmarkScrape64Targets: the exporter's serving path
// against client_golang's histograms and promhttp's gzip level, side by side.
func scrapeServing(t *testing.T) *benchkit.HotPaths {
	return goBench(t, "", "./collector", nil, "-run", "^$", "-bench", "Scrape64Targets", "-benchmem", "-benchtime", "300x", "-count", "6")
}

// goBench runs `go test` with args on the package pkg of the module in the directory module
// of the repository ("" for the daemon's, "tests" for this one), and parses the output.
func goBench(t *testing.T, module, pkg string, env []string, args ...string) *benchkit.HotPaths {
	cmd := exec.Command("go", append(append([]string{"test"}, args...), pkg)...)
	cmd.Dir = testenv.RepoPath(module)
	cmd.Env = append(os.Environ(), env...)
	outp, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test %s %s (in %s): %v\n%s", strings.Join(args, " "), pkg, cmd.Dir, err, outp)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if strings.ContainsAny(a, "^$.") {
			quoted[i] = "'" + a + "'"
		}
	}
	goTest := "go test "
	if module != "" {
		goTest = "go -C " + module + " test "
	}
	h := &benchkit.HotPaths{Command: strings.TrimSpace(strings.Join(env, " ") + " " + goTest + pkg + " " + strings.Join(quoted, " "))}
	var kept []string
	for _, line := range strings.Split(string(outp), "\n") {
		if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "cpu:") || strings.HasPrefix(line, "goos:") {
			kept = append(kept, line)
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		b := benchkit.GoBench{Name: f[0], Metrics: map[string]float64{}}
		b.N, _ = strconv.Atoi(f[1])
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		h.Results = append(h.Results, b)
	}
	h.Output = strings.Join(kept, "\n")
	if len(h.Results) == 0 {
		t.Fatalf("no benchmark results in:\n%s", outp)
	}
	return h
}

func machine(t *testing.T, dir string) benchkit.Machine {
	m := benchkit.Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), Fio: benchkit.FioVersion(), BenchDir: dir}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	if out, err := exec.Command("prometheus-node-exporter", "--version").CombinedOutput(); err == nil {
		m.NodeExporter = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if out, err := exec.Command("etcd", "--version").CombinedOutput(); err == nil {
		m.Etcd = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if out, err := exec.Command("prometheus", "--version").CombinedOutput(); err == nil {
		m.Prometheus = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if out, err := exec.Command("findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--target", dir).Output(); err == nil {
		f := strings.Fields(string(out))
		if len(f) == 3 {
			m.BenchFS = f[0] + " on " + f[1] + " (" + f[2] + ")"
		}
	}
	m.HZ = kernelHZ()
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.Load = "load average " + strings.Join(strings.Fields(string(data))[:3], " ") + " when the run started (the machine is shared)"
	}
	return m
}

// kernelHZ is CONFIG_HZ from /proc/config.gz, "" when the kernel does not publish it.
func kernelHZ() string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return ""
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			return v
		}
	}
	return ""
}

func procField(file, key string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
