package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/ceilingcase"
)

const (
	ceilingBegin = "<!-- ceiling section: make bench, or TestCeilingReport alone, rewrites it -->"
	ceilingEnd   = "<!-- end of ceiling section -->"
)

// ceilingFigures are one run of the ceiling scenario at the default probe rate.
type ceilingFigures struct {
	When           time.Time
	Took           time.Duration
	Write, Read    ceilingcase.Cap
	Steady, Sick   ceilingcase.Negative
	Burst          ceilingcase.BurstScore
	BurstErr       error
	Deadline       time.Duration
	SteadyN, SickN string // what each control is
}

// TestCeilingReport runs the ceiling scenario of tests/internal/ceilingcase (a write IOPS
// cap, a read bandwidth cap, a gp2-like burst bucket kept by a controller, an unthrottled
// neighbour and a FUSE-slowed sick device, side by side in one exporter) with the probes at
// their defaults, as a deployment runs them, and writes what it named and when, and the
// burst credit estimate scored against the controller's log. make bench runs it
// (DISKPROBE_BENCH_CEILING=1); make test runs the scenario with the probes every 2 s
// (tests/e2e/ceiling_test.go).
func TestCeilingReport(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_CEILING") == "" {
		t.Skip("set DISKPROBE_BENCH_CEILING=1 to run the ceiling scenario at the default probe rate")
	}
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "fio")
	deadline := 15 * time.Minute
	if s := os.Getenv("DISKPROBE_BENCH_CEILING_DEADLINE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		deadline = d
	}
	c := ceilingFigures{When: time.Now().UTC(), Deadline: deadline}
	res := ceilingcase.Run(t, ceilingcase.Options{Deadline: deadline, Negatives: 5 * time.Minute, Settle: time.Minute})
	c.Took = time.Since(c.When)
	s := res.Samples
	c.Write = ceilingcase.ScoreCap(s["write"], ceilingcase.NamedWrite, ceilingcase.WriteCap, func(s ceilingcase.Sample) float64 { return s.IOPS["write"] })
	c.Read = ceilingcase.ScoreCap(s["read"], ceilingcase.NamedRead, ceilingcase.ReadCap, func(s ceilingcase.Sample) float64 { return s.Bytes["read"] })
	c.Steady, c.Sick = ceilingcase.ScoreNegative(s["steady"]), ceilingcase.ScoreNegative(s["sick"])
	c.Burst, c.BurstErr = ceilingcase.ScoreBurst(s["burst"], res.Log)
	md := c.markdown()
	t.Log("\n" + md)
	if out := os.Getenv(reportEnv); out != "" {
		doc, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(benchkit.SpliceSection(string(doc), ceilingBegin, ceilingEnd, md)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for what, cp := range map[string]ceilingcase.Cap{"the write IOPS cap": c.Write, "the read bandwidth cap": c.Read, "the emptied bucket's baseline": c.Burst.Baseline} {
		if cp.Named == nil {
			t.Errorf("%s was not named within 10 %% in %v", what, deadline)
		}
	}
	for what, n := range map[string]ceilingcase.Negative{"the unthrottled neighbour's device": c.Steady, "the FUSE-slowed device": c.Sick} {
		if n.Capped != nil {
			t.Errorf("%s was called capped after %v", what, n.Capped.At.Round(time.Second))
		}
	}
	if c.BurstErr != nil {
		t.Error(c.BurstErr)
	}
}

func (c ceilingFigures) markdown() string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("\n%s\n## Ceilings and burst credit, against blkio throttles\n<a id=\"ceilings\"></a>\n\n", ceilingBegin)
	w("Run on %s (took %s). One exporter, five targets side by side, each an ext4 on a loop device of\n", c.When.Format("2006-01-02 15:04 UTC"), c.Took.Round(time.Second))
	w("its own (in /dev/shm, but the sick one's) with a fio neighbour; the probes at their defaults (fsync\n")
	w("and randread every 15 s, 20 operations), as a deployment runs them. The exporter and the neighbours\n")
	w("of the capped devices share the one blkio (v1) cgroup carrying the limits, as etcd, the probe and a\n")
	w("neighbour share a cloud volume's cap. A level is *named* at the first scrape (every second) with\n")
	w("`diskprobe_device_at_ceiling` 1 and the ceiling gauge within 10 %% of the limit; times count from\n")
	w("the neighbours' start. The recogniser and its constants are in\n")
	w("[docs/design.md](docs/design.md#how-a-ceiling-is-recognised); the scenario is\n")
	w("tests/internal/ceilingcase, which make test runs with the probes every 2 s (tests/e2e/ceiling_test.go).\n\n")

	w("| capped case | limit | level named | error | named after | `at_ceiling` changes after |\n|---|---|---|---|---|---|\n")
	capRow := func(name, limit string, cp ceilingcase.Cap, unit func(float64) string, since time.Duration, sinceWord string) {
		if cp.Named == nil {
			w("| %s | %s | not named in %s | | | |\n", name, limit, cp.Last.At.Round(time.Second))
			return
		}
		w("| %s | %s | %s | %+.1f %% | %s%s | %d in the %s after |\n", name, limit, unit(cp.Level), cp.ErrorPct(),
			(cp.Named.At - since).Round(time.Second), sinceWord, cp.Flips, cp.After().Round(time.Second))
	}
	iops := func(v float64) string { return fmt.Sprintf("%.1f IOPS", v) }
	mibs := func(v float64) string { return fmt.Sprintf("%.2f MiB/s", v/(1<<20)) }
	capRow("write IOPS cap (`blkio.throttle.write_iops_device`), 4 KiB random direct writes at depth 4", fmt.Sprintf("%d write IOPS", ceilingcase.WriteCap), c.Write, iops, 0, "")
	capRow("read bandwidth cap (`blkio.throttle.read_bps_device`), 16 KiB random direct reads at depth 4", fmt.Sprintf("%d MiB/s of reads", ceilingcase.ReadCap>>20), c.Read, mibs, 0, "")
	if c.BurstErr == nil {
		capRow("gp2-like bucket, emptied: its baseline", fmt.Sprintf("%g write IOPS", ceilingcase.Baseline), c.Burst.Baseline, iops, c.Burst.EmptyAt,
			fmt.Sprintf(" after the bucket emptied (at %s)", c.Burst.EmptyAt.Round(time.Second)))
	}
	w("\n| control (not capped) | never called capped for | scrapes | |\n|---|---|---|---|\n")
	negRow := func(name string, n ceilingcase.Negative) {
		if n.Capped != nil {
			w("| %s | called capped after %s | %d | NOT met |\n", name, n.Capped.At.Round(time.Second), n.Scrapes)
			return
		}
		w("| %s | %s | %d | met |\n", name, n.Last.At.Round(time.Second), n.Scrapes)
	}
	negRow("unthrottled device, a steady 300 IOPS neighbour it keeps up with", c.Steady)
	negRow(fmt.Sprintf("sick device: the image on FUSE whose fsync slows from 2 to %s over a minute and stays there, four etcd-like writers", ceilingcase.SickHold), c.Sick)

	w("\nThe burst bucket: gp2 scaled down (baseline %g IOPS, burst %g, %g I/Os, so that it drains in about\n", ceilingcase.Baseline, ceilingcase.Burst, ceilingcase.Bucket)
	w("67 s at the burst), told to the exporter in a `volume:` block. A controller of the test's own keeps the\n")
	w("truth: every 100 ms it reads the device's completions (/sys/block/…/stat), keeps the balance by the same\n")
	w("rules, and switches the device's write IOPS throttle to the baseline when the bucket is empty and back\n")
	w("to the burst once it holds a second of it. Each scrape's `diskprobe_volume_burst_balance_ratio` is set\n")
	w("against the controller's balance at that moment (|difference| of the ratios, 0..1); each forecast\n")
	w("(scrape time + `diskprobe_volume_burst_empty_seconds`), made while both said the bucket drained, against\n")
	w("when the controller's bucket emptied.\n\n")
	if c.BurstErr != nil {
		w("Not scored: %v.\n\n", c.BurstErr)
	} else {
		bs := c.Burst
		w("| figure | mean | max | over |\n|---|---|---|---|\n")
		w("| balance ratio error against the controller's | %.3f | %.3f | %d scrapes |\n", bs.MeanErr, bs.MaxErr, bs.Scrapes)
		w("| forecast of the empty time, \\|error\\| | %.1f s | %.1f s | %d forecasts (the bucket emptied after %s) |\n\n",
			bs.MeanForecast, bs.MaxForecast, bs.Forecasts, bs.EmptyAt.Round(time.Second))
	}
	w("The run watches until both caps and the emptied bucket's baseline are named and a minute more has\n")
	w("shown whether `at_ceiling` holds, and at least 5 minutes for the controls (%s at most).\n\n", c.Deadline)
	w("Command: `DISKPROBE_BENCH_CEILING=1 go -C tests test ./bench -run '^TestCeilingReport$' -count=1 -v`\n")
	w("%s\n", ceilingEnd)
	return b.String()
}
