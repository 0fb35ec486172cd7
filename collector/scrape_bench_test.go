package collector

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/gzipresponse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// BenchmarkScrape64Targets serves /metrics gzipped for 64 targets with fsync and randread
// (as bench/'s scale figure does), with 2000 samples in each histogram: the exporter's
// own serving path (LatencyVec, gzip at BestSpeed) against client_golang's HistogramVec
// and promhttp's default gzip, side by side.
//
//	go test -run '^$' -bench Scrape64Targets -benchmem ./collector
func BenchmarkScrape64Targets(b *testing.B) {
	for _, c := range []struct {
		name         string
		clientGolang bool
		handler      func(*prometheus.Registry) http.Handler
	}{
		{"client_golang-histograms/promhttp-gzip", true, promhttpGzip},
		{"client_golang-histograms/bestspeed-gzip", true, bestSpeedGzip},
		{"latencyvec/promhttp-gzip", false, promhttpGzip},
		{"latencyvec/bestspeed-gzip", false, bestSpeedGzip},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := c.handler(populated(c.clientGolang))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("GET", "/metrics", nil)
				req.Header.Set("Accept-Encoding", "gzip")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
				b.ReportMetric(float64(w.Body.Len()), "gzip-bytes")
			}
		})
	}
}

func promhttpGzip(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

func bestSpeedGzip(reg *prometheus.Registry) http.Handler {
	return gzipresponse.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, DisableCompression: true}))
}

// populated is a registry with the exporter's metrics for 64 targets; with clientGolang
// the three latency histograms are client_golang HistogramVecs instead of LatencyVecs.
func populated(clientGolang bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	m := NewMetrics(prometheus.NewRegistry())
	for _, c := range m.all {
		if _, latency := c.(*LatencyVec); !latency || !clientGolang {
			reg.MustRegister(c)
		}
	}
	observe := func(v *LatencyVec) func(target string, d float64) {
		return func(target string, d float64) { v.WithLabelValues(target).Observe(d) }
	}
	ours := [3]*LatencyVec{}
	names := []string{"fdatasync_duration_seconds", "write_duration_seconds", "read_duration_seconds"}
	for i, name := range names {
		ours[i] = latencyVecNamed(m, name)
	}
	fdatasync, write, read := observe(ours[0]), observe(ours[1]), observe(ours[2])
	if clientGolang {
		vecs := [3]*prometheus.HistogramVec{}
		for i, name := range names {
			vecs[i] = clientGolangVec(name, "help", ours[i].buckets)
			reg.MustRegister(vecs[i])
		}
		observeCG := func(v *prometheus.HistogramVec) func(string, float64) {
			return func(target string, d float64) { v.WithLabelValues(target).Observe(d) }
		}
		fdatasync, write, read = observeCG(vecs[0]), observeCG(vecs[1]), observeCG(vecs[2])
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 64 {
		name := fmt.Sprintf("t%02d", i)
		for range 2000 {
			fdatasync(name, 0.0002+r.ExpFloat64()*0.0005)
			write(name, 0.00001+r.ExpFloat64()*0.00001)
			read(name, 0.00005+r.ExpFloat64()*0.0001)
		}
		for _, p := range []string{"fsync", "randread"} {
			m.runs.WithLabelValues(name, p).Add(100)
			m.errors.WithLabelValues(name, p)
			m.lastSuccess.WithLabelValues(name, p).Set(1.7e9)
			m.ioOps.WithLabelValues(name, p).Add(1000)
			m.ioBytes.WithLabelValues(name, p).Add(1e6)
		}
		m.busy.WithLabelValues(name).Set(0.01)
		m.otherIOPS.WithLabelValues(name).Set(3)
		m.targetInfo.WithLabelValues(name, "/var/lib/"+name, "directory", "vda", "QEMU HARDDISK", "", "1").Set(1)
	}
	return reg
}

// latencyVecNamed is the latency vector of m whose metric is diskprobe_<name>.
func latencyVecNamed(m *Metrics, name string) *LatencyVec {
	for _, c := range m.all {
		if v, ok := c.(*LatencyVec); ok && strings.Contains(v.desc.String(), `"`+namespace+"_"+name+`"`) {
			return v
		}
	}
	panic("no latency vector diskprobe_" + name)
}
