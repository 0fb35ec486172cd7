package collector

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// clientGolangVec is the HistogramVec LatencyVec stands in for: the same buckets, the
// same native factor, no bucket limit (LatencyVec's range is fixed instead).
func clientGolangVec(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: name, Help: help,
		Buckets:                     buckets,
		NativeHistogramBucketFactor: NativeBucketFactor,
	}, []string{"target"})
}

// latencySamples are durations a probe can report, and the edges where an off-by-one
// in bucket selection would show: 0, 1 ns, every classic edge and every native boundary
// from 1 µs to 100 s exactly, and log-uniform values from 1 ns to a day.
func latencySamples(r *rand.Rand, n int) []float64 {
	s := []float64{0, 1e-9, time.Duration(1).Seconds(), 3 * 24 * 3600}
	s = append(s, LatencyBuckets...)
	for exp := -20; exp <= 7; exp++ {
		for _, frac := range nativeBounds {
			b := math.Ldexp(frac, exp)
			s = append(s, b, math.Nextafter(b, 0), math.Nextafter(b, math.Inf(1)))
		}
	}
	for range n {
		s = append(s, math.Exp(r.Float64()*(math.Log(86400)-math.Log(1e-9))+math.Log(1e-9)))
		s = append(s, time.Duration(r.Int64N(int64(20*time.Millisecond))).Seconds())
	}
	return s
}

func writeMetric(t *testing.T, m prometheus.Metric) *dto.Metric {
	t.Helper()
	out := &dto.Metric{}
	if err := m.Write(out); err != nil {
		t.Fatal(err)
	}
	out.Histogram.CreatedTimestamp = nil // the two were created at different times
	return out
}

// bucketSets are the classic bucket sets the exporter's histograms use: LatencyBuckets
// (fdatasync, read), CommitBuckets (commit) and none (write: native buckets only).
var bucketSets = map[string][]float64{"LatencyBuckets": LatencyBuckets, "CommitBuckets": CommitBuckets, "native only": nil}

func TestLatencyHistogramWritesWhatClientGolangWrites(t *testing.T) {
	for name, buckets := range bucketSets {
		t.Run(name, func(t *testing.T) { testWritesWhatClientGolangWrites(t, buckets) })
	}
}

func testWritesWhatClientGolangWrites(t *testing.T, buckets []float64) {
	ours := NewLatencyVec("fdatasync_duration_seconds", "help", buckets)
	theirs := clientGolangVec("fdatasync_duration_seconds", "help", buckets)
	oh, th := ours.WithLabelValues("data"), theirs.WithLabelValues("data")
	r := rand.New(rand.NewPCG(1, 2))

	compare := func(when string) {
		t.Helper()
		o := writeMetric(t, latencyMetric{desc: ours.desc, h: oh})
		c := writeMetric(t, th.(prometheus.Metric))
		if !proto.Equal(o, c) {
			t.Fatalf("%s: ours\n%v\nclient_golang\n%v", when, o, c)
		}
	}
	compare("empty")
	// Buckets with gaps of 1, 2, 3 and many empty keys between them: spans are cut at
	// gaps of more than two.
	for _, key := range []int{-100, -98, -95, -91, -60, -59, 3} {
		v := math.Pow(2, (float64(key)-0.5)/8) // inside bucket key, clear of its edges
		if got := nativeKey(v); got != key {
			t.Fatalf("nativeKey(%g) = %d, want %d", v, got, key)
		}
		oh.Observe(v)
		th.Observe(v)
	}
	compare("sparse buckets")
	for batch := range 5 { // scrapes in between fold the cold half back each time
		for _, v := range latencySamples(r, 2000) {
			oh.Observe(v)
			th.Observe(v)
		}
		compare("after batch " + string(rune('1'+batch)))
		compare("scraped twice") // a scrape must not change what the next one sees
	}
}

// TestLatencyVecExposesWhatHistogramVecExposes compares whole registries, through the
// text and protobuf encoders a scrape uses: name, help, type, labels, every line.
func TestLatencyVecExposesWhatHistogramVecExposes(t *testing.T) {
	for name, buckets := range bucketSets {
		t.Run(name, func(t *testing.T) { testExposesWhatHistogramVecExposes(t, buckets) })
	}
}

func testExposesWhatHistogramVecExposes(t *testing.T, buckets []float64) {
	ours, theirs := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	ov, tv := NewLatencyVec("read_duration_seconds", "Time of each read.", buckets), clientGolangVec("read_duration_seconds", "Time of each read.", buckets)
	ours.MustRegister(ov)
	theirs.MustRegister(tv)
	r := rand.New(rand.NewPCG(3, 4))
	for _, target := range []string{"b", "a", "c"} {
		for _, v := range latencySamples(r, 100) {
			ov.WithLabelValues(target).Observe(v)
			tv.WithLabelValues(target).Observe(v)
		}
	}
	if n := ov.DeletePartialMatch(prometheus.Labels{"target": "c"}); n != 1 {
		t.Errorf("DeletePartialMatch deleted %d, want 1", n)
	}
	tv.DeletePartialMatch(prometheus.Labels{"target": "c"})
	if n := ov.DeletePartialMatch(prometheus.Labels{"target": "gone"}); n != 0 {
		t.Errorf("DeletePartialMatch of an unknown target deleted %d", n)
	}

	for _, format := range []expfmt.Format{expfmt.NewFormat(expfmt.TypeTextPlain), expfmt.NewFormat(expfmt.TypeOpenMetrics), expfmt.NewFormat(expfmt.TypeProtoDelim)} {
		o, c := encode(t, ours, format), encode(t, theirs, format)
		if !bytes.Equal(o, c) {
			t.Errorf("%s differs:\nours\n%s\nclient_golang\n%s", format, o, c)
		}
	}
}

func encode(t *testing.T, g prometheus.Gatherer, format expfmt.Format) []byte {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			m.Histogram.CreatedTimestamp = nil
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestLatencyHistogramScrapesAreConsistentUnderObservation scrapes while several
// goroutines observe: every scrape must be a consistent snapshot (its count the sum of
// its native buckets, its classic buckets no more than its count), counts must never go
// back, and nothing may be lost.
func TestLatencyHistogramScrapesAreConsistentUnderObservation(t *testing.T) {
	v := NewLatencyVec("fdatasync_duration_seconds", "help", LatencyBuckets)
	h := v.WithLabelValues("data")
	const writers, each = 4, 20000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range each {
				h.Observe(r.Float64() * 0.02)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	var last uint64
	check := func() uint64 {
		m := writeMetric(t, latencyMetric{desc: v.desc, h: h})
		his := m.GetHistogram()
		var native, bucket int64
		for _, d := range his.GetPositiveDelta() {
			bucket += d
			native += bucket
		}
		count := his.GetSampleCount()
		if uint64(native)+his.GetZeroCount() != count {
			t.Fatalf("torn scrape: count %d, native buckets %d + zero %d", count, native, his.GetZeroCount())
		}
		if top := his.GetBucket()[len(his.GetBucket())-1].GetCumulativeCount(); top != count { // all samples ≤ 20 ms ≤ the top edge
			t.Fatalf("torn scrape: count %d, top bucket %d", count, top)
		}
		if count < last {
			t.Fatalf("count went back from %d to %d", last, count)
		}
		last = count
		return count
	}
	scrapes := 0
	for running := true; running; scrapes++ {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	if got := check(); got != writers*each {
		t.Errorf("count %d after %d observations", got, writers*each)
	}
	t.Logf("%d scrapes while observing", scrapes)
}

func TestNativeKeyIsClampedToTheKeptRange(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want int
	}{
		{1, 0}, {2, 8}, {0.5, -8}, {1e-12, nativeMinKey}, {1e12, nativeMaxKey}, {math.Inf(1), nativeMaxKey},
	} {
		if got := nativeKey(c.v); got != c.want {
			t.Errorf("nativeKey(%g) = %d, want %d", c.v, got, c.want)
		}
	}
}
