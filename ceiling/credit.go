package ceiling

import (
	"math"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// Bucket is a burst bucket as a volume was sold with it (AWS gp2, st1, sc1; Azure
// Premium SSD P1–P20): credits earned at Refill per second, spent one per I/O (or per
// byte, Bytes), holding at most Size. Baseline is the rate the volume is held to when
// the bucket is empty, in the same unit.
type Bucket struct {
	Size, Refill, Baseline float64
	Bytes                  bool
}

// Credit estimates the balance of a volume's burst bucket from the device's completed
// I/O (everyone's: the provider counts all of it), by the model AWS documents for gp2:
// every second the bucket earns Refill and the device spends what it did,
//
//	balance += (Refill − spent) · dt,  clamped to [0, Size].
//
// It cannot see the provider's own balance: it starts full (a volume at rest refills),
// and is re-anchored to empty (Empty) when the device is recognised held at its
// baseline, which is what an empty bucket does. Its methods are called by one goroutine
// and do not allocate.
type Credit struct {
	b        Bucket
	balance  float64
	started  bool
	last     time.Time
	atLast   device.Stats
	spending float64 // credits per second spent over the last update
}

// creditStep is the least time between two updates, so that the spending rate that the
// forecast divides by is not read off a few milliseconds between two probe rounds.
const creditStep = time.Second

// NewCredit returns the estimate of a full bucket b.
func NewCredit(b Bucket) *Credit { return &Credit{b: b, balance: b.Size} }

// Observe takes the device's counters read at now.
func (c *Credit) Observe(now time.Time, s device.Stats) {
	if !c.started || !s.After(c.atLast) || now.Before(c.last) {
		c.started, c.last, c.atLast = true, now, s
		return
	}
	dt := now.Sub(c.last)
	if dt < creditStep {
		return
	}
	d := s.Sub(c.atLast)
	spent := float64(d.ReadIOs + d.WriteIOs + d.DiscardIOs)
	if c.b.Bytes {
		spent = float64(d.ReadSectors+d.WriteSectors) * 512
	}
	sec := dt.Seconds()
	c.spending = spent / sec
	c.balance = min(max(c.balance+c.b.Refill*sec-spent, 0), c.b.Size)
	c.last, c.atLast = now, s
}

// Empty re-anchors the estimate: the device was seen held at its baseline.
func (c *Credit) Empty() { c.balance = 0 }

// Ratio is the estimated share of the bucket left, 0..1.
func (c *Credit) Ratio() float64 {
	if c.b.Size <= 0 {
		return 0
	}
	return c.balance / c.b.Size
}

// EmptyIn is how long, at the spending rate of the last update, until the bucket is
// empty: +Inf when it is not draining, 0 when it is empty.
func (c *Credit) EmptyIn() float64 {
	drain := c.spending - c.b.Refill
	switch {
	case c.balance <= 0:
		return 0
	case drain <= 0:
		return math.Inf(1)
	}
	return c.balance / drain
}

// AtBaseline is whether a recognised state holds the device at the bucket's baseline
// (within ±flat), which re-anchors the estimate to empty.
func (b Bucket) AtBaseline(st *State, flat float64) bool {
	if !st.AtCeiling || b.Baseline <= 0 {
		return false
	}
	series := TotalIOPS
	if b.Bytes {
		series = TotalBytes
	}
	// An IOPS cap on writes shows as a write level; total carries the reads too.
	for _, s := range [...]Series{series, series - 1, series - 2} {
		if c := st.Ceiling[s]; c > 0 && c >= (1-flat)*b.Baseline && c <= (1+flat)*b.Baseline {
			return true
		}
	}
	return false
}
