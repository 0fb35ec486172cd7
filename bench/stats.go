package bench

import (
	"slices"
	"time"
)

// Percentile is the nearest-rank percentile p (0–100) of samples, exact: the smallest
// sample with at least p % of the samples at or below it, as fio reports its
// percentiles (fio rounds to its histogram bin, under 2 %).
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100 + 0.999999999)
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// SortedCopy returns the samples in ascending order, leaving the argument alone.
func SortedCopy(samples []time.Duration) []time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s
}

// Median is the median of the values (the mean of the middle two for an even count).
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
