package alertreplay

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// ruleFiles are the shipped rule files: alerts/*.yml (the promtool tests are in alerts/tests/).
func ruleFiles(t *testing.T) []string {
	all, err := filepath.Glob(testenv.RepoPath("alerts", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range all {
		if !strings.Contains(filepath.Base(f), "test") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatal("no rule files in alerts/")
	}
	return files
}

func replayAll(t *testing.T, size Size) ([]*Result, time.Duration) {
	lib, err := LoadLibrary("testdata")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The etcd mixin's fsync alert rides along, for the lead time the report gives over it.
	files := append(ruleFiles(t), "testdata/etcd-mixin.rules.yml")
	results, err := RunAll(context.Background(), Scenarios(lib, size), files, DefaultProbing, time.Minute, Workers())
	if err != nil {
		t.Fatal(err)
	}
	return results, time.Since(began)
}

// TestAlertsMeetIssue15Goals replays the fast subset (healthy stretches of two days
// rather than thirty, baselines of a day rather than a week, 36 Tail-at-Store slow hours in
// healthy groups rather than 1,440) and fails on any goal missed, issue 15's and issue 23's
// (groups of peers): a page that comes too late, a critical for a backup, a false firing on a
// healthy disk, a hardware alert for a shared cause or a starved host.
func TestAlertsMeetIssue15Goals(t *testing.T) {
	if testing.Short() {
		t.Skip("replays days of simulated time")
	}
	// The replay allocates per query and keeps little: fewer collections, ~15 % less CPU.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	results, elapsed := replayAll(t, Fast)
	t.Logf("fast subset: %d scenarios in %v", len(results), elapsed.Round(time.Millisecond))
	if w, peer, dd, ok := WarningsPerDiskDay(results); ok {
		t.Logf("healthy fleets, %.0f disk-days' worth of Tail-at-Store slow hours: %d peer warnings, %.4f per disk-day (goal ≤ 0.01); all warnings %d, %.4f per disk-day",
			dd, peer, float64(peer)/dd, w, float64(w)/dd)
	}
	for _, row := range Judge(results) {
		if !row.Met {
			t.Errorf("%s — %s: %s", row.Goal, row.Scenario, row.Measured)
		} else {
			t.Logf("met: %s — %s: %s", row.Goal, row.Scenario, row.Measured)
		}
	}
}

// TestReplayScenariosAlone replays, at the full size of `make bench`, only the scenarios
// whose name starts with DISKPROBE_REPLAY_ONLY (e.g. "fleet:", the Tail-at-Store healthy
// groups), and logs how each goal fared; it writes no report. For a goal's figure without the
// whole replay: DISKPROBE_REPLAY_ONLY=fleet: go -C tests test ./internal/alertreplay -run '^TestReplayScenariosAlone$' -v -timeout 90m
func TestReplayScenariosAlone(t *testing.T) {
	prefix := os.Getenv("DISKPROBE_REPLAY_ONLY")
	if prefix == "" {
		t.Skip("set DISKPROBE_REPLAY_ONLY to the start of the scenario names to replay")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	lib, err := LoadLibrary("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var chosen []*Scenario
	for _, sc := range Scenarios(lib, Full) {
		if strings.HasPrefix(sc.Name, prefix) {
			chosen = append(chosen, sc)
		}
	}
	if len(chosen) == 0 {
		t.Fatalf("no scenario name starts with %q", prefix)
	}
	began := time.Now()
	files := append(ruleFiles(t), "testdata/etcd-mixin.rules.yml")
	results, err := RunAll(context.Background(), chosen, files, DefaultProbing, time.Minute, Workers())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d scenarios in %v", len(results), time.Since(began).Round(time.Second))
	for _, row := range Judge(results) {
		t.Logf("%v %s — %s: %s", row.Met, row.Goal, row.Scenario, row.Measured)
	}
}

// TestReplayReport is the full replay of `make bench`: thirty days of each healthy disk,
// a week of baseline, the recordings; it rewrites its own section of the report named by
// DISKPROBE_BENCH_REPORT. DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./internal/alertreplay -run '^TestReplayReport$' -v -timeout 60m
func TestReplayReport(t *testing.T) {
	out := os.Getenv("DISKPROBE_BENCH_REPORT")
	if out == "" {
		t.Skip("set DISKPROBE_BENCH_REPORT to the BENCHMARKS.md to rewrite")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	results, elapsed := replayAll(t, Full)
	rep := &Report{
		Command:   "DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./internal/alertreplay -run '^TestReplayReport$' -count=1 -v -timeout 60m",
		Date:      time.Now(),
		Elapsed:   elapsed,
		EvalEvery: time.Minute,
		Probing:   DefaultProbing,
		Results:   results,
	}
	doc, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(rep.Splice(string(doc))), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("%s: %d evals, %d samples, %v", r.Scenario.Name, r.Evals, r.Samples, r.Elapsed.Round(time.Millisecond))
	}
	for _, row := range Judge(results) {
		t.Logf("%v %s — %s: %s", row.Met, row.Goal, row.Scenario, row.Measured)
	}
}
