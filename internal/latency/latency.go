// Package latency holds the one nearest-rank percentile that check, the benchmarks and
// the end-to-end tests read their latencies with, so that a p99 means the same in all.
package latency

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile (p from 0 to 100) of sorted samples:
// the smallest sample with at least p % of the samples at or below it, the sample at rank
// ceil(p/100 × n). This is what fio's completion-latency percentiles approximate from their
// bins (within fio's ~2 % bin width). With fewer than 1000 samples p99.9 is the maximum;
// p 0 is the minimum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The rank is computed in integer thousandths of a percent so that 99.9 % of 1000
	// samples is rank 999 exactly, not 999.0000000000001 rounded up to 1000.
	milli := int64(math.Round(p * 1000))
	rank := (milli*int64(n) + 100_000 - 1) / 100_000
	rank = max(1, min(rank, int64(n)))
	return sorted[rank-1]
}

// Sorted returns the samples in ascending order, leaving the argument alone.
func Sorted(samples []time.Duration) []time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s
}
