package collector

import (
	"context"

	"golang.org/x/time/rate"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// Budget is a target's hard rate limit: token buckets on operations per second and bytes
// per second, shared by all its probes and by probe file preparation.
type Budget struct {
	ops   *rate.Limiter
	bytes *rate.Limiter
}

// NewBudget sizes the buckets from the limits. The operations bucket holds a tenth of a
// second's worth (at least one), so a round runs at the limit after a short burst; the
// bytes bucket holds a tenth of a second's worth or the largest block, whichever is more.
func NewBudget(l config.Limits, largestBlock int) *Budget {
	opsBurst := max(1, int(l.IOPS/10))
	bytesBurst := max(largestBlock, int(l.Bandwidth/10))
	return &Budget{
		ops:   rate.NewLimiter(rate.Limit(l.IOPS), opsBurst),
		bytes: rate.NewLimiter(rate.Limit(l.Bandwidth), bytesBurst),
	}
}

// Wait blocks until one operation of n bytes may start.
func (b *Budget) Wait(ctx context.Context, n int) error {
	if err := b.ops.Wait(ctx); err != nil {
		return err
	}
	return b.bytes.WaitN(ctx, n)
}

// WouldWait says whether Wait for one operation of n bytes would block: the probes
// read their thread's CPU wait before a wait that is not a disk's.
func (b *Budget) WouldWait(n int) bool {
	return b.ops.Tokens() < 1 || b.bytes.Tokens() < float64(n)
}
