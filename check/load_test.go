package check

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// loadReport is a FAIL under load whose stream got half of what it asked.
func loadReport() *Report {
	rep := fsyncReport(120*time.Millisecond, 200*time.Millisecond, 220*time.Millisecond, 40*time.Microsecond, 13)
	rep.Load = &LoadResult{
		Requested: LoadOptions{ReadIOPS: 50, WriteIOPS: 300, Bandwidth: 64 << 20, BlockSize: 4096},
		Ran:       10 * time.Second,
		ReadOps:   495, WriteOps: 2990, Bytes: 320 << 20,
		ReadIOPS: 49.5, WriteIOPS: 299, BytesPerSecond: 32 << 20,
	}
	rep.judge()
	return rep
}

// A reader of the summary must tell "the disk is slow" from "the load was too heavy": the
// achieved load is printed beside the requested one and beside the verdict, and a load
// that fell short is said so.
func TestLoadThatFellShortIsSaidBesideTheVerdict(t *testing.T) {
	var out bytes.Buffer
	if err := loadReport().WriteText(&out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"load (competing I/O, 10s from its warm-up to the end of the jobs): 50 random reads/s and 300 random writes/s of 4 KiB, 64.0 MiB/s of sequential writes in 1 MiB blocks",
		"    load          requested  achieved\n",
		"    read IOPS            50        50\n",
		"    write IOPS          300       299\n",
		"    write MiB/s        64.0      32.0\n",
		"FAIL  fdatasync p99 120ms >= 10ms",
		"\n      under a load that fell short: 32.0 MiB/s of 64.0 MiB/s sequential writes (50%) (see WARN)\n",
		"WARN  the competing load fell short of what was asked (32.0 MiB/s of 64.0 MiB/s sequential writes (50%)): the disk could not take it",
		"the FAIL is the disk saturated by the load",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	// The verdict comes first, its load line right under it, the remarks after.
	if i, j := strings.Index(got, "FAIL  "), strings.Index(got, "      under a load"); i < 0 || j < i || strings.Contains(got[i:j], "WARN") {
		t.Errorf("the load line is not right under the verdict:\n%s", got)
	}
}

func TestLoadTakenInFullIsSaidAsRequested(t *testing.T) {
	rep := loadReport()
	rep.Load.Requested.Bandwidth = 16 << 20
	rep.Load.BytesPerSecond = 15 << 20 // 94 %: within the 90 % etcdctl check perf allows
	rep.Warnings = nil
	rep.judge()
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "      under load: 50 read IOPS, 299 write IOPS, 15.0 MiB/s of sequential writes, as requested\n"; !strings.Contains(out.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "fell short") {
		t.Errorf("a load at 94%% or more of each rate is said to have fallen short:\n%s", out.String())
	}
}

func TestFellShortIsUnderNinetyPercentOfARequestedRate(t *testing.T) {
	l := &LoadResult{Requested: LoadOptions{ReadIOPS: 100, WriteIOPS: 0, Bandwidth: 10 << 20}, ReadIOPS: 89.9, BytesPerSecond: 9 << 20}
	if got := l.FellShort(); !slices.Equal(got, []string{"read_iops"}) {
		t.Errorf("fell short %v, want [read_iops]: 89.9 of 100 is short, 9 of 10 MiB/s is not, a rate of 0 asked is never", got)
	}
}

func TestLoadJSONFieldsAreTheDocumentedOnes(t *testing.T) {
	var out bytes.Buffer
	if err := loadReport().WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range DocumentedLoadJSONFields {
		if _, ok := lookup(doc, path); !ok {
			t.Errorf("JSON has no %s:\n%s", strings.Join(path, "."), out.String())
		}
	}
	if v, _ := lookup(doc, []string{"load", "achieved", "write_bytes_per_second"}); v != float64(32<<20) {
		t.Errorf("achieved bandwidth %v, want %d", v, 32<<20)
	}
	if v, _ := lookup(doc, []string{"load", "fell_short"}); !slices.Equal(toStrings(v), []string{"write_bytes_per_second"}) {
		t.Errorf("fell_short %v", v)
	}
	// Without --load, "load" is null, not absent: scripts test it.
	out.Reset()
	if err := fsyncReport(time.Millisecond, time.Millisecond, time.Millisecond, time.Microsecond, 3000).WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"load": null`) {
		t.Errorf("an idle run's JSON lacks \"load\": null:\n%s", out.String())
	}
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

func TestLoadOptionsNameTheFlagThatIsWrong(t *testing.T) {
	def := DefaultLoad()
	for _, c := range []struct {
		change func(*LoadOptions)
		want   string
	}{
		{func(l *LoadOptions) { l.ReadIOPS = -1 }, "--load-read-iops -1: at least 0"},
		{func(l *LoadOptions) { l.WriteIOPS = -5 }, "--load-write-iops -5: at least 0"},
		{func(l *LoadOptions) { l.Bandwidth = 100 << 10 }, "--load-bandwidth 100KiB: at least 1MiB a second"},
		{func(l *LoadOptions) { *l = LoadOptions{BlockSize: 4096} }, "runs no load; drop --load"},
		{func(l *LoadOptions) { l.BlockSize = 1000 }, "--load-block-size 1000: a multiple of 512 B up to 1MiB"},
		{func(l *LoadOptions) { l.BlockSize = 2 << 20 }, "--load-block-size 2097152: a multiple of 512 B up to 1MiB"},
	} {
		l := def
		c.change(&l)
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", l, err, c.want)
		}
	}
	if err := def.Validate(); err != nil {
		t.Errorf("the default load is refused: %v", err)
	}
}

// TestRunInProcessUnderLoadReportsTheLoadAndCleansUp runs a check with --load in the test
// process, so that the race detector sees the load's jobs beside the measured one, and
// checks that the load's file goes with the rest.
func TestRunInProcessUnderLoadReportsTheLoadAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	load := LoadOptions{ReadIOPS: 50, WriteIOPS: 100, Bandwidth: 4 << 20, BlockSize: 4096}
	rep, err := Run(t.Context(), Options{
		Path: dir, Probes: []string{"fsync"},
		Size: 64 * 2300, BlockSize: 2300, Duration: time.Second, Threshold: DefaultThreshold, Load: &load,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Load
	if l == nil {
		t.Fatal("no load in the report of a run with a load")
	}
	// The load ran its 2 s warm-up at least: some of each part completed, none beyond its
	// rate by more than its bucket (8 operations, 4 MiB) over the time it ran.
	if l.Ran < loadWarmup {
		t.Errorf("the load ran %v, less than its warm-up", l.Ran)
	}
	for _, p := range []struct {
		name      string
		done, max float64
	}{
		{"reads", float64(l.ReadOps), 50*l.Ran.Seconds() + loadIOPSDepth},
		{"writes", float64(l.WriteOps), 100*l.Ran.Seconds() + loadIOPSDepth},
		{"stream bytes", float64(l.Bytes), float64(4<<20)*l.Ran.Seconds() + loadStreamDepth*LoadStreamBlock},
	} {
		if p.done <= 0 || p.done > p.max {
			t.Errorf("%s: %.0f done in %v, want some and at most %.0f (the rate asked)", p.name, p.done, l.Ran, p.max)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}
