package latency

import (
	"testing"
	"time"
)

func TestPercentileIsTheNearestRankNotAnInterpolation(t *testing.T) {
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i + 1)
	}
	for _, c := range []struct {
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{7}, 99, 7},
		{[]time.Duration{1, 2, 3, 4}, 50, 2}, // rank ceil(2) = 2, not the mean 2.5
		{[]time.Duration{1, 2, 3, 4}, 51, 3},
		{[]time.Duration{1, 2, 3, 4}, 0, 1},
		{[]time.Duration{1, 2, 3, 4}, 100, 4},
		{thousand, 99.9, 999}, // not 1000 by a float rounding of 999.0000000000001
		{thousand, 99, 990},
		{thousand[:999], 99.9, 999},
	} {
		if got := Percentile(c.samples, c.p); got != c.want {
			t.Errorf("Percentile(%d samples, %v) = %d, want %d", len(c.samples), c.p, got, c.want)
		}
	}
}

func TestSortedLeavesTheSamplesInTheirOrder(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	if got := Sorted(in); got[0] != 1 || got[2] != 3 || in[0] != 3 {
		t.Errorf("Sorted(%v) = %v", in, got)
	}
}
