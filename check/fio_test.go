package check_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// Agreement with fio's etcd recipe is a benchmark, not a timed test: it takes minutes
// and compares two noisy measurements. `make bench` runs it with DISKPROBE_BENCH=1.
const benchEnv = "DISKPROBE_BENCH"

// fioSync runs fio's etcd recipe in dir (inside cgroupProcs when set) and returns its
// fdatasync ("sync") latency percentiles p50 and p99.
func fioSync(t *testing.T, dir, cgroupProcs, size string) (p50, p99 time.Duration) {
	t.Helper()
	args := []string{"--name=etcd", "--directory=" + dir, "--rw=write", "--ioengine=sync", "--fdatasync=1",
		"--size=" + size, "--bs=2300", "--unlink=1", "--output-format=json"}
	var r result
	if cgroupProcs != "" {
		r = runCommand(t, 10*time.Minute, "sh", append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", cgroupProcs, "fio"}, args...)...)
	} else {
		r = runCommand(t, 10*time.Minute, "fio", args...)
	}
	if r.code != 0 {
		t.Fatalf("fio: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// fio prints notes before the JSON on some versions.
	out := r.stdout[strings.Index(r.stdout, "{"):]
	var doc struct {
		Jobs []struct {
			Sync struct {
				LatNs struct {
					Percentile map[string]float64 `json:"percentile"`
				} `json:"lat_ns"`
			} `json:"sync"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("fio JSON: %v\n%s", err, out)
	}
	pct := doc.Jobs[0].Sync.LatNs.Percentile
	p50ns, ok50 := pct["50.000000"]
	p99ns, ok99 := pct["99.000000"]
	if !ok50 || !ok99 {
		t.Fatalf("fio reported no sync percentiles: %v", pct)
	}
	return time.Duration(p50ns), time.Duration(p99ns)
}

// checkSync runs the real check on dir and returns its fdatasync p50 and p99.
func checkSync(t *testing.T, dir, cgroupProcs, size string) (p50, p99 time.Duration) {
	t.Helper()
	args := []string{"check", "--json", "--no-progress", "--size=" + size, dir}
	var r result
	if cgroupProcs != "" {
		r = runCommand(t, 10*time.Minute, "sh", append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", cgroupProcs, testenv.Binary(t)}, args...)...)
	} else {
		r = runCommand(t, 10*time.Minute, testenv.Binary(t), args...)
	}
	if r.code != 0 && r.code != 1 {
		t.Fatalf("check: exit %d\n%s", r.code, r.stderr)
	}
	lat := field(decode(t, r), "probes", "fsync", "fdatasync_seconds").(map[string]any)
	sec := func(k string) time.Duration { return time.Duration(lat[k].(float64) * float64(time.Second)) }
	return sec("p50"), sec("p99")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// agreement is one case of the comparison, for BENCHMARKS.md.
type agreement struct {
	Case        string    `json:"case"`
	Rounds      int       `json:"rounds"`
	CheckP50    []float64 `json:"check_p50_seconds"`
	CheckP99    []float64 `json:"check_p99_seconds"`
	FioP50      []float64 `json:"fio_p50_seconds"`
	FioP99      []float64 `json:"fio_p99_seconds"`
	RatioP50    float64   `json:"median_ratio_p50"`
	RatioP99    float64   `json:"median_ratio_p99"`
	CheckCmd    string    `json:"check_command"`
	FioCmd      string    `json:"fio_command"`
	GoalP50Pct  float64   `json:"goal_p50_percent"`
	GoalP99Pct  float64   `json:"goal_p99_percent"`
	GoalsMetP50 bool      `json:"goal_met_p50"`
	GoalsMetP99 bool      `json:"goal_met_p99"`
}

// TestCheckAgreesWithFioEtcdRecipe runs check and fio's etcd recipe on the same
// directory, interleaved (the order alternates each round), and compares the medians of
// their fdatasync p50 and p99 with the benchmark goals: p50 within ±10 %, p99 within
// ±20 %. DISKPROBE_BENCH_DIR picks the directory (default: a temporary directory, on the
// root filesystem here), DISKPROBE_BENCH_ROUNDS the rounds (default 3), and
// DISKPROBE_BENCH_OUT a file to write the figures to as JSON.
func TestCheckAgreesWithFioEtcdRecipe(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("benchmark: set %s=1 (make bench) to compare check with fio", benchEnv)
	}
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("DISKPROBE_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	dir := os.Getenv("DISKPROBE_BENCH_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	var results []agreement
	// size is check's --size; fioSize the same for fio (its "m" and "k" are binary).
	compare := func(name, dir, cgroupProcs, size, fioSize string) {
		a := agreement{Case: name, Rounds: rounds, GoalP50Pct: 10, GoalP99Pct: 20,
			CheckCmd: "diskprobe_exporter check --json --size=" + size + " DIR",
			FioCmd:   "fio --name=etcd --directory=DIR --rw=write --ioengine=sync --fdatasync=1 --size=" + fioSize + " --bs=2300 --output-format=json"}
		var cp50, cp99, fp50, fp99 []time.Duration
		for i := range rounds {
			run := []func(){
				func() { a, b := checkSync(t, dir, cgroupProcs, size); cp50, cp99 = append(cp50, a), append(cp99, b) },
				func() { a, b := fioSync(t, dir, cgroupProcs, fioSize); fp50, fp99 = append(fp50, a), append(fp99, b) },
			}
			if i%2 == 1 {
				run[0], run[1] = run[1], run[0]
			}
			run[0]()
			run[1]()
			t.Logf("%s round %d: check p50 %v p99 %v | fio p50 %v p99 %v", name, i+1, cp50[i], cp99[i], fp50[i], fp99[i])
		}
		for i := range rounds {
			a.CheckP50 = append(a.CheckP50, cp50[i].Seconds())
			a.CheckP99 = append(a.CheckP99, cp99[i].Seconds())
			a.FioP50 = append(a.FioP50, fp50[i].Seconds())
			a.FioP99 = append(a.FioP99, fp99[i].Seconds())
		}
		a.RatioP50 = float64(median(cp50)) / float64(median(fp50))
		a.RatioP99 = float64(median(cp99)) / float64(median(fp99))
		a.GoalsMetP50 = a.RatioP50 >= 0.9 && a.RatioP50 <= 1.1
		a.GoalsMetP99 = a.RatioP99 >= 0.8 && a.RatioP99 <= 1.2
		t.Logf("%s medians of %d: check p50 %v p99 %v | fio p50 %v p99 %v | check/fio p50 %.2f p99 %.2f",
			name, rounds, median(cp50), median(cp99), median(fp50), median(fp99), a.RatioP50, a.RatioP99)
		if !a.GoalsMetP50 {
			t.Errorf("%s: check's fdatasync p50 is %.2f× fio's, goal within ±10%%", name, a.RatioP50)
		}
		if !a.GoalsMetP99 {
			t.Errorf("%s: check's fdatasync p99 is %.2f× fio's, goal within ±20%%", name, a.RatioP99)
		}
		results = append(results, a)
	}

	compare("root filesystem, etcd recipe (22 MiB of 2300 B writes)", dir, "", "22MiB", "22m")

	dev, loopDir := testenv.LoopExt4(t, 256<<20)
	cg := testenv.ThrottleWrites(t, dev, 20)
	compare("loop ext4 throttled to 20 write IOPS (150 KiB)", loopDir, filepath.Join(cg.Path, "cgroup.procs"), "150KiB", "150k")

	if out := os.Getenv("DISKPROBE_BENCH_OUT"); out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Error(err)
		}
	}
}
