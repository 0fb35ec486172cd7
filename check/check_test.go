package check

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

func TestPercentilesAreExactNearestRank(t *testing.T) {
	// 1..1000 ms, shuffled: the p-th percentile is exactly p*10 ms.
	samples := make([]time.Duration, 1000)
	for i := range samples {
		samples[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	l := Summarize(samples)
	want := map[string][2]time.Duration{
		"min":   {l.Min, 1 * time.Millisecond},
		"p50":   {l.P50, 500 * time.Millisecond},
		"p90":   {l.P90, 900 * time.Millisecond},
		"p99":   {l.P99, 990 * time.Millisecond},
		"p99.9": {l.P999, 999 * time.Millisecond},
		"max":   {l.Max, 1000 * time.Millisecond},
		"mean":  {l.Mean, 500500 * time.Microsecond},
	}
	for name, got := range want {
		if got[0] != got[1] {
			t.Errorf("%s of 1..1000 ms = %v, want %v", name, got[0], got[1])
		}
	}
	// Sample standard deviation of 1..1000 is sqrt(1000*1001/12) = 288.819 ms.
	if d := l.Stddev - 288819*time.Microsecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("stddev of 1..1000 ms = %v, want 288.819ms", l.Stddev)
	}
	if l.Count != 1000 {
		t.Errorf("count %d, want 1000", l.Count)
	}
}

func TestPercentileOfFewSamplesIsNeverInterpolated(t *testing.T) {
	// With 10 samples, one slow fdatasync is the p99 and the p99.9: a slow outlier must
	// not be averaged away between two ranks.
	samples := []time.Duration{1, 1, 1, 1, 1, 1, 1, 1, 1, 50}
	for i := range samples {
		samples[i] *= time.Millisecond
	}
	l := Summarize(samples)
	if l.P99 != 50*time.Millisecond || l.P999 != 50*time.Millisecond {
		t.Errorf("p99 %v, p99.9 %v of nine 1 ms and one 50 ms sample, want both 50ms", l.P99, l.P999)
	}
	if l.P90 != time.Millisecond {
		t.Errorf("p90 %v, want 1ms (rank 9 of 10)", l.P90)
	}
	if got := Summarize(nil); got != (Latency{}) {
		t.Errorf("summary of no samples = %+v, want zero", got)
	}
	if got := Summarize([]time.Duration{7}); got.Stddev != 0 || got.P999 != 7 {
		t.Errorf("summary of one sample = %+v", got)
	}
}

func fsyncReport(p99, p999, max, writeP99 time.Duration, writesPerSecond float64) *Report {
	return &Report{
		Path:      "/var/lib/etcd",
		Device:    &Device{Name: "nvme0n1p2", Disk: "nvme0n1", Model: "Example SSD", Serial: "S1", Rotational: false},
		Threshold: DefaultThreshold,
		Fsync: &FsyncResult{
			Ops: 10029, BlockSize: 2300, Elapsed: 4 * time.Second, WritesPerSecond: writesPerSecond,
			Fdatasync: Latency{Count: 10029, Min: 80 * time.Microsecond, P50: 200 * time.Microsecond, P90: 300 * time.Microsecond,
				P99: p99, P999: p999, Max: max, Mean: 250 * time.Microsecond, Stddev: 100 * time.Microsecond},
			Write: Latency{Count: 10029, Min: time.Microsecond, P50: 5 * time.Microsecond, P90: 10 * time.Microsecond,
				P99: writeP99, P999: writeP99, Max: writeP99, Mean: 6 * time.Microsecond, Stddev: 2 * time.Microsecond},
		},
	}
}

func withCPUWait(r *Report, waited, inCalls time.Duration) *Report {
	r.Fsync.CPU = CPUWait{Known: true, Waited: waited, InCalls: inCalls}
	return r
}

func TestVerdictIsOnFdatasyncP99AgainstThreshold(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		rep      *Report
		verdict  Verdict
		exit     int
		warnings []string // substrings, one per expected warning, in order
	}{
		{"fast SSD", fsyncReport(2*ms, 5*ms, 8*ms, 40*time.Microsecond, 3000), Pass, 0, nil},
		{"p99 just under 10ms passes but its tail warns", fsyncReport(9900*time.Microsecond, 30*ms, 40*ms, 40*time.Microsecond, 900), Pass, 0,
			[]string{"p99.9 30.0ms is above the 10ms threshold"}},
		{"p99 at the threshold fails", fsyncReport(10*ms, 12*ms, 20*ms, 40*time.Microsecond, 500), Fail, 1,
			[]string{"p99.9 12.0ms"}},
		{"failing SSD: slow, stalls, slow writes, few writes/s", fsyncReport(55*ms, 700*ms, 1200*ms, 3*ms, 20), Fail, 1,
			[]string{"p99.9 700ms", "slowest fdatasync took 1.20s", "write(2) p99 3.00ms", "20 writes/s is under the 50"}},
		{"starved host: the verdict is still fio's, and the remarks name the CPUs", withCPUWait(fsyncReport(30*ms, 40*ms, 50*ms, 40*time.Microsecond, 900), 4*time.Second, 10*time.Second), Fail, 1,
			[]string{"p99.9 40.0ms", "the host's CPUs, not the disk, account for 40% of this write+fdatasync latency"}},
		{"a little CPU wait is no remark", withCPUWait(fsyncReport(2*ms, 5*ms, 8*ms, 40*time.Microsecond, 3000), 2*time.Second, 10*time.Second), Pass, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.rep.judge()
			if c.rep.Verdict != c.verdict || c.rep.ExitCode() != c.exit {
				t.Errorf("verdict %s exit %d, want %s exit %d", c.rep.Verdict, c.rep.ExitCode(), c.verdict, c.exit)
			}
			if len(c.rep.Warnings) != len(c.warnings) {
				t.Fatalf("warnings %q, want %d matching %q", c.rep.Warnings, len(c.warnings), c.warnings)
			}
			for i, w := range c.warnings {
				if !strings.Contains(c.rep.Warnings[i], w) {
					t.Errorf("warning %d %q does not say %q", i, c.rep.Warnings[i], w)
				}
			}
			var text bytes.Buffer
			if err := c.rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), string(c.verdict)+"  fdatasync p99 ") {
				t.Errorf("summary has no %s verdict line:\n%s", c.verdict, text.String())
			}
		})
	}
}

func withCommit(r *Report, p99 time.Duration) *Report {
	r.Commit = &CommitResult{Ops: 200, Pages: 10, PageSize: 4096, FileSize: CommitFileSize, Elapsed: time.Second, CommitsPerSecond: 200,
		Commit:    Latency{Count: 200, Min: time.Millisecond, P50: 2 * time.Millisecond, P90: 3 * time.Millisecond, P99: p99, P999: p99, Max: p99, Mean: 2 * time.Millisecond},
		Threshold: DefaultCommitThreshold}
	return r
}

// etcd gives two figures; the report gives both verdicts, each on its own line and in the
// JSON, and fails when either fails: a disk whose WAL is fast and whose backend is slow
// (scattered writes on a busy SSD, a thin volume) is not good enough for etcd.
func TestCommitVerdictIsGivenBesideTheFdatasyncOneAndEitherFails(t *testing.T) {
	ms := time.Millisecond
	fast := func() *Report { return fsyncReport(2*ms, 5*ms, 8*ms, 40*time.Microsecond, 3000) }
	slow := func() *Report { return fsyncReport(15*ms, 20*ms, 30*ms, 40*time.Microsecond, 3000) }
	cases := []struct {
		name          string
		rep           *Report
		fsync, commit Verdict
		verdict       Verdict
		exit          int
	}{
		{"both fast", withCommit(fast(), 10*ms), Pass, Pass, Pass, 0},
		{"WAL fast, backend slow", withCommit(fast(), 40*ms), Pass, Fail, Fail, 1},
		{"commit p99 at the 25ms edge fails", withCommit(fast(), 25*ms), Pass, Fail, Fail, 1},
		{"WAL slow, backend fast", withCommit(slow(), 10*ms), Fail, Pass, Fail, 1},
		{"both slow", withCommit(slow(), 40*ms), Fail, Fail, Fail, 1},
		{"commit alone", withCommit(&Report{Path: "/x", Threshold: DefaultThreshold}, 40*ms), "", Fail, Fail, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.rep.judge()
			if c.rep.Verdict != c.verdict || c.rep.ExitCode() != c.exit || c.rep.Commit.Verdict != c.commit {
				t.Errorf("verdict %s (commit %s) exit %d, want %s (commit %s) exit %d", c.rep.Verdict, c.rep.Commit.Verdict, c.rep.ExitCode(), c.verdict, c.commit, c.exit)
			}
			var text bytes.Buffer
			if err := c.rep.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			out := text.String()
			want := []string{string(c.commit) + "  commit p99 " + FormatDuration(c.rep.Commit.Commit.P99)}
			if c.fsync != "" {
				want = append(want, string(c.fsync)+"  fdatasync p99 ")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("summary has no line %q:\n%s", w, out)
				}
			}
			if !strings.Contains(out, "commit (etcd's backend commit): 200 commits of 10 x 4.0 KiB page writes") {
				t.Errorf("summary has no commit job:\n%s", out)
			}
			var js bytes.Buffer
			if err := c.rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for _, path := range [][]string{{"verdict"}, {"probes", "commit", "verdict"}, {"probes", "fsync", "verdict"}, {"probes", "commit", "threshold_seconds"}} {
				got[strings.Join(path, ".")], _ = lookup(doc, path)
			}
			wantJSON := map[string]any{"verdict": string(c.verdict), "probes.commit.verdict": string(c.commit), "probes.commit.threshold_seconds": 0.025, "probes.fsync.verdict": nil}
			if c.fsync != "" {
				wantJSON["probes.fsync.verdict"] = string(c.fsync)
			}
			for k, v := range wantJSON {
				if got[k] != v {
					t.Errorf("JSON %s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

func TestReadOnlyRunHasNoVerdict(t *testing.T) {
	rep := &Report{Path: "/dev/sdb", Threshold: DefaultThreshold, Randread: &RandreadResult{Ops: 100, Elapsed: time.Second, ReadsPerSecond: 100,
		Read: Latency{P99: 300 * time.Microsecond}}}
	rep.judge()
	if rep.Verdict != None || rep.ExitCode() != 0 {
		t.Errorf("verdict %s exit %d without the fsync probe, want NONE and 0", rep.Verdict, rep.ExitCode())
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "no verdict") || strings.Contains(text.String(), "PASS") {
		t.Errorf("summary of a read-only run:\n%s", text.String())
	}
}

// TestJSONFieldsAreTheDocumentedOnes pins the JSON interface: these names are what
// scripts read, so a rename must fail here.
func TestJSONFieldsAreTheDocumentedOnes(t *testing.T) {
	rep := withCommit(fsyncReport(2*time.Millisecond, 5*time.Millisecond, 8*time.Millisecond, 40*time.Microsecond, 3000), 5*time.Millisecond)
	rep.Randread = &RandreadResult{Ops: 5000, Elapsed: 10 * time.Second, ReadsPerSecond: 500, Read: Latency{P99: time.Millisecond}}
	rep.Seqread = &SeqreadResult{Bytes: SeqreadBytes, IO: time.Second, BytesPerSecond: SeqreadBytes}
	rep.judge()
	var out bytes.Buffer
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, path := range DocumentedJSONFields {
		if _, ok := lookup(doc, path); !ok {
			t.Errorf("JSON has no %s:\n%s", strings.Join(path, "."), out.String())
		}
	}
	if v, _ := lookup(doc, []string{"probes", "fsync", "fdatasync_seconds", "p99"}); v != 0.002 {
		t.Errorf("fdatasync p99 = %v, want 0.002 (seconds)", v)
	}
	if v, _ := lookup(doc, []string{"threshold_seconds"}); v != 0.01 {
		t.Errorf("threshold_seconds = %v, want 0.01", v)
	}
	if v, _ := lookup(doc, []string{"warnings"}); v == nil {
		t.Errorf("warnings is null; scripts expect an array")
	}
}

func lookup(doc map[string]any, path []string) (any, bool) {
	var cur any = doc
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func TestProgressBarOnTerminalPlainLinesOtherwise(t *testing.T) {
	var done float64
	st := func(time.Duration) (float64, string) { return done, "42/100 writes" }
	clock := time.Unix(0, 0)
	for _, tty := range []bool{true, false} {
		var out bytes.Buffer
		p := &Progress{w: &out, tty: tty, interval: time.Hour, now: func() time.Time { return clock }}
		done = 0.25
		clock = time.Unix(0, 0)
		begin := clock
		clock = begin.Add(3 * time.Second)
		p.draw("fsync", st, clock.Sub(begin), false)
		p.draw("fsync", st, clock.Sub(begin), true)
		got := out.String()
		if tty {
			// 25 % in 3 s: 9 s to go; the bar is redrawn in place and the last one kept.
			for _, want := range []string{"\rfsync     [=======>", " 25%", "ETA 9.0s", "\x1b[K", "100%", "in 3.0s\x1b[K\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("terminal progress %q lacks %q", got, want)
				}
			}
		} else {
			want := "fsync:  25%  42/100 writes  elapsed 3.0s  ETA 9.0s\nfsync: done in 3.0s: 42/100 writes\n"
			if got != want {
				t.Errorf("plain progress:\n%q\nwant\n%q", got, want)
			}
		}
	}
}

// TestRunInProcessReportsEveryProbeAndCleansUp runs the check in the test process (so
// the race detector sees the progress goroutine beside the I/O) with all three probes;
// under -short (the race tier) with the fsync probe alone, which needs no 256 MiB read file.
func TestRunInProcessReportsEveryProbeAndCleansUp(t *testing.T) {
	probes, reads := []string{"seqread", "commit", "fsync", "randread"}, true
	if testing.Short() {
		probes, reads = []string{"fsync", "commit"}, false
	}
	dir := t.TempDir()
	var progress testenv.SyncBuffer
	rep, err := Run(t.Context(), Options{
		Path: dir, Probes: probes,
		Size: 256 * 2300, BlockSize: 2300, Duration: 300 * time.Millisecond, Threshold: DefaultThreshold, Commits: 20,
		Progress: NewProgress(&progress, true, 10*time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fsync == nil || rep.Fsync.Ops != 256 || rep.Fsync.Fdatasync.Count != 256 || rep.Fsync.Write.Count != 256 {
		t.Errorf("fsync result %+v, want 256 writes and 256 fdatasyncs", rep.Fsync)
	}
	if reads && (rep.Randread == nil || rep.Randread.Ops == 0 || rep.Randread.Read.Count != rep.Randread.Ops) {
		t.Errorf("randread result %+v", rep.Randread)
	}
	if reads && (rep.Seqread == nil || rep.Seqread.Bytes != SeqreadBytes || rep.Seqread.BytesPerSecond <= 0) {
		t.Errorf("seqread result %+v, want %d bytes read", rep.Seqread, SeqreadBytes)
	}
	if c := rep.Commit; c == nil || c.Ops != 20 || c.Commit.Count != 20 || c.Pages != 10 || c.Elapsed <= 0 || c.Verdict == "" {
		t.Errorf("commit result %+v, want 20 commits of 10 pages, judged", rep.Commit)
	}
	if rep.Verdict != Pass && rep.Verdict != Fail {
		t.Errorf("verdict %q with the fsync probe run", rep.Verdict)
	}
	// The probes run in a fixed order whatever --probes says: fsync, commit, then the reads.
	out := progress.String()
	if i, c, j, k := strings.Index(out, "fsync "), strings.Index(out, "commit "), strings.Index(out, "randread "), strings.Index(out, "seqread "); i < 0 || c < i || reads && (c >= j || j >= k) {
		t.Errorf("progress shows the phases out of order:\n%q", out)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}
