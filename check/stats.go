package check

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/latency"
)

// Latency sums up the raw samples of one system call. Percentiles are exact, read from
// the sorted samples by the nearest-rank rule (the smallest sample with at least p % of
// the samples at or below it), which is what fio's completion-latency percentiles
// approximate from their bins. Stddev is the sample standard deviation (n-1), as fio's.
type Latency struct {
	Count  int
	Min    time.Duration
	P50    time.Duration
	P90    time.Duration
	P99    time.Duration
	P999   time.Duration
	Max    time.Duration
	Mean   time.Duration
	Stddev time.Duration
}

// Summarize computes the latency summary of samples; it sorts samples in place.
func Summarize(samples []time.Duration) Latency {
	n := len(samples)
	if n == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	mean := sum / float64(n)
	var sq float64
	for _, s := range samples {
		d := float64(s) - mean
		sq += d * d
	}
	var stddev float64
	if n > 1 {
		stddev = math.Sqrt(sq / float64(n-1))
	}
	return Latency{
		Count:  n,
		Min:    samples[0],
		P50:    latency.Percentile(samples, 50),
		P90:    latency.Percentile(samples, 90),
		P99:    latency.Percentile(samples, 99),
		P999:   latency.Percentile(samples, 99.9),
		Max:    samples[n-1],
		Mean:   time.Duration(math.Round(mean)),
		Stddev: time.Duration(math.Round(stddev)),
	}
}

// MarshalJSON writes the summary in seconds, with the field names of the documented
// check output: min, p50, p90, p99, p99.9, max, mean, stddev.
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Min    float64 `json:"min"`
		P50    float64 `json:"p50"`
		P90    float64 `json:"p90"`
		P99    float64 `json:"p99"`
		P999   float64 `json:"p99.9"`
		Max    float64 `json:"max"`
		Mean   float64 `json:"mean"`
		Stddev float64 `json:"stddev"`
	}{l.Min.Seconds(), l.P50.Seconds(), l.P90.Seconds(), l.P99.Seconds(), l.P999.Seconds(), l.Max.Seconds(), l.Mean.Seconds(), l.Stddev.Seconds()})
}
