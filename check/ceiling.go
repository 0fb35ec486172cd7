package check

import (
	"fmt"
	"slices"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// The rule that tells a ceiling (a provisioned or throttled IOPS cap) from a device that
// saturates, read off a sweep. A rate limiter hands out I/Os at one rate whatever they are:
// the same IOPS for 4 KiB as for 32 KiB blocks (its bandwidth cap is far above), for
// random as for sequential reads, and already at queue depth 1 when the cap is below what
// one I/O at a time reaches. A device that saturates shows its own shape: more IOPS with
// a deeper queue (its parallelism), fewer with larger blocks (its bandwidth), sequential
// apart from random (read-ahead, seeks).
//
// Measured on this machine (docs/check.md#ceilings), 4–32 KiB reads of a 1–4 MiB loop device
// at queue depth 32, cells of 0.6–1 s: under blkio throttle.read_iops_device=200, 184–201
// IOPS in both patterns (±5 % of the level), 0.94–1.14× queue depth 1; at =1000, 971–1119,
// 0.91–1.29×; unthrottled, 12,000–55,000 (the median's 0.3–1.4×), 1.9–10.5×. The thresholds
// leave margin on both sides. A FUSE filesystem without asynchronous direct I/O (go-fuse's)
// serves each read inside io_submit, so the deep queue holds one I/O at a time: its reads,
// delayed 2 ms each, looked exactly like a ceiling of ~390 IOPS from depth 1, with 99.7–99.9 %
// of each cell spent inside io_submit (an unthrottled loop device: 13–56 %, io_submit's own
// cost against I/Os of tens of µs). A cell above submitBound is not judged.
const (
	// ceilingSpread is how far each cell may be from the level: throttled cells were within
	// 5 % at 200 IOPS, 8 % at 1000.
	ceilingSpread = 0.15
	// ceilingGrowth is the most the deep queue may add to depth 1's IOPS: up to 1.29×
	// throttled, from 1.9× unthrottled.
	ceilingGrowth = 1.5
	// ceilingMinBlock and ceilingMaxBlock bound the block sizes the level is read from: 4 KiB
	// (a page: below it most devices' IOPS do not change with the size) to 32 KiB (an 8×
	// range in which a device's own limit falls with the bytes moved).
	ceilingMinBlock = 4 * config.KiB
	ceilingMaxBlock = 32 * config.KiB
	// submitBound is the share of a job's time inside io_submit above which its queue is
	// taken to have held one I/O at a time.
	submitBound = 0.9
)

// queued says whether a job kept its I/Os queued rather than served inside io_submit.
func queued(submitting, elapsed time.Duration) bool {
	return submitting.Seconds() <= submitBound*elapsed.Seconds()
}

// Ceiling is an IOPS ceiling recognised in a sweep: the level the reads stopped at.
type Ceiling struct {
	IOPS     float64 // the level: the median of the deep queue's cells
	FromQD   int     // the queue depth from which IOPS stopped growing (1: it binds from depth 1)
	MinBlock int     // the block sizes it was read from
	MaxBlock int
}

// steadyIOPS is a cell's rate without its first round: at the start depth I/Os are
// submitted at once, so a rate limiter lets them in over its allowance, which in a short
// cell is a visible share (32 over a 1 s cell at 200 IOPS is +16 %).
func (c Cell) steadyIOPS() float64 {
	return perSecond(float64(max(0, c.Ops-c.Depth)), c.Elapsed)
}

// ceiling applies the rule to the sweep's cells; nil when they do not show a ceiling, or
// when the sweep lacks the cells to tell (one depth, or a file smaller than 32 KiB).
func (rep *SweepReport) ceiling() *Ceiling {
	if rep.Depth <= 1 {
		return nil
	}
	var deep, shallow []float64
	for bs := int(ceilingMinBlock); bs <= ceilingMaxBlock; bs *= 2 {
		for _, p := range []Pattern{Random, Sequential} {
			d, ok1 := rep.cell(bs, p, rep.Depth)
			s, ok2 := rep.cell(bs, p, 1)
			if !ok1 || !ok2 {
				return nil
			}
			if !queued(d.Submitting, d.Elapsed) {
				// io_submit returned only once the read was served: the deep queue held
				// one I/O at a time, and a device serving one at a time looks flat too.
				return nil
			}
			deep = append(deep, d.steadyIOPS())
			shallow = append(shallow, s.steadyIOPS())
		}
	}
	level := median(deep)
	if level <= 0 {
		return nil
	}
	for i := range deep {
		if deep[i] < level*(1-ceilingSpread) || deep[i] > level*(1+ceilingSpread) {
			return nil // not one level across sizes and patterns: the device's own shape
		}
		if deep[i] > ceilingGrowth*shallow[i] {
			return nil // grew with the queue: a device's parallelism (or a knee above depth 1)
		}
	}
	return &Ceiling{IOPS: level, FromQD: 1, MinBlock: ceilingMinBlock, MaxBlock: ceilingMaxBlock}
}

// median of xs (sorted in place).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// sentence is the ceiling's line in the summary.
func (c *Ceiling) sentence() string {
	return fmt.Sprintf("IOPS stop growing at ~%s from queue depth %d, the same for every block size from %s to %s, random and sequential: a provisioned or throttled ceiling, not the device's own limit",
		roundIOPS(c.IOPS), c.FromQD, config.FormatSize(int64(c.MinBlock)), config.FormatSize(int64(c.MaxBlock)))
}

// roundIOPS writes a level with two significant digits: what a ±10 % measurement supports.
func roundIOPS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", float64(int64(v/100+0.5)*100))
	case v >= 100:
		return fmt.Sprintf("%.0f", float64(int64(v/10+0.5)*10))
	}
	return fmt.Sprintf("%.0f", v)
}
