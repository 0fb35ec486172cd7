package check

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// sweepOf is a sweep whose cells at 4–32 KiB have the given IOPS at depth 1 and 32.
func sweepOf(qd1, deep func(bs int, p Pattern) float64) *SweepReport {
	rep := &SweepReport{Depth: 32}
	for bs := 4096; bs <= 32768; bs *= 2 {
		for _, p := range []Pattern{Random, Sequential} {
			for _, c := range []struct {
				depth int
				iops  float64
			}{{1, qd1(bs, p)}, {32, deep(bs, p)}} {
				// A 1 s cell; the first round (depth I/Os) on top of the steady rate.
				rep.Cells = append(rep.Cells, Cell{BlockSize: bs, Pattern: p, Depth: c.depth, Ops: int(c.iops) + c.depth, Elapsed: time.Second})
			}
		}
	}
	return rep
}

func TestCeilingRule(t *testing.T) {
	flat := func(v float64) func(int, Pattern) float64 { return func(int, Pattern) float64 { return v } }
	cases := []struct {
		name string
		rep  *SweepReport
		want float64 // 0: no ceiling
	}{
		// blkio throttle.read_iops_device=200, as measured: one level, from depth 1.
		{"throttled", sweepOf(flat(180), flat(190)), 190},
		// A device: 4–8× from depth 1, fewer IOPS with larger blocks.
		{"device", sweepOf(func(bs int, _ Pattern) float64 { return 10000 * 4096 / float64(bs) }, func(bs int, _ Pattern) float64 { return 50000 * 4096 / float64(bs) }), 0},
		// Flat across sizes and patterns, but 12× from depth 1: a FUSE server's parallelism.
		{"knee above depth 1", sweepOf(flat(400), flat(4800)), 0},
		// Flat with the depth, but random apart from sequential: a disk that seeks.
		{"seeks", sweepOf(func(_ int, p Pattern) float64 {
			if p == Random {
				return 120
			}
			return 3000
		}, func(_ int, p Pattern) float64 {
			if p == Random {
				return 150
			}
			return 3100
		}), 0},
	}
	for _, c := range cases {
		got := c.rep.ceiling()
		switch {
		case c.want == 0 && got != nil:
			t.Errorf("%s: ceiling %+v, want none", c.name, *got)
		case c.want != 0 && (got == nil || got.IOPS != c.want || got.FromQD != 1):
			t.Errorf("%s: ceiling %+v, want %v from depth 1", c.name, got, c.want)
		}
	}
	// A sweep without the cells to tell says nothing.
	if got := (&SweepReport{Depth: 1}).ceiling(); got != nil {
		t.Errorf("one depth: ceiling %+v", got)
	}
}

func TestFirstWriteVerdict(t *testing.T) {
	iv := func(iops float64, first int) WriteInterval {
		return WriteInterval{IOPS: iops, Ops: int(iops), FirstWrites: first}
	}
	rep := &FirstWriteReport{Intervals: []WriteInterval{iv(300, 150), iv(310, 150), iv(5000, 20), iv(9000, 0), iv(9500, 0), iv(9200, 0)},
		FirstMean: 3 * time.Millisecond, RewriteMean: 100 * time.Microsecond}
	rep.Intervals[3].Start = 15 * time.Second
	rep.judge()
	if rep.Verdict != WarmedUp || rep.WarmedUpAt != 15*time.Second || rep.Penalty < 0.96 || rep.Penalty > 0.97 {
		t.Errorf("verdict %s at %s, penalty %.3f; want warmed up at 15s, 0.967", rep.Verdict, rep.WarmedUpAt, rep.Penalty)
	}
	// Still first writes in the last intervals, and a penalty: still warming up.
	rep = &FirstWriteReport{Intervals: []WriteInterval{iv(300, 150), iv(310, 150), iv(305, 150)}, FirstMean: 3 * time.Millisecond, RewriteMean: 100 * time.Microsecond}
	rep.judge()
	if rep.Verdict != WarmingUp {
		t.Errorf("verdict %s with first writes still slow, want %s", rep.Verdict, WarmingUp)
	}
	// No penalty: stable with first writes among them is warmed up.
	rep = &FirstWriteReport{Intervals: []WriteInterval{iv(9000, 4000), iv(9100, 4000), iv(9050, 4000)}, FirstMean: 105 * time.Microsecond, RewriteMean: 100 * time.Microsecond}
	rep.judge()
	if rep.Verdict != WarmedUp || rep.Penalty >= penaltyFloor {
		t.Errorf("verdict %s, penalty %.2f without a first-write penalty; want %s", rep.Verdict, rep.Penalty, WarmedUp)
	}
}

func TestCeilingInTheSummary(t *testing.T) {
	rep := &SweepReport{Depth: 32, Ceiling: &Ceiling{IOPS: 192.4, FromQD: 1, MinBlock: 4096, MaxBlock: 32768}}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "CEILING  IOPS stop growing at ~190 from queue depth 1, the same for every block size from 4KiB to 32KiB, random and sequential: a provisioned or throttled ceiling, not the device's own limit"
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
}
