package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/internal/gzipresponse"
)

func testHandler(t testing.TB, reg *prometheus.Registry, opts httpOptions, reload func() error) http.Handler {
	t.Helper()
	h, err := newHandler(reg, opts, func() error { return nil }, reload, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// heldCollector holds every Collect until release is closed: a scrape in flight.
type heldCollector struct {
	entered chan struct{}
	release chan struct{}
}

func (c heldCollector) Describe(chan<- *prometheus.Desc) {}

func (c heldCollector) Collect(chan<- prometheus.Metric) {
	c.entered <- struct{}{}
	<-c.release
}

// A scrape refused by the in-flight limit took a gzip writer first (about 1.2 MiB when the
// pool had none spare, which is when the limit refuses): promhttp's limit sat inside the
// compression. The limit is now outside it.
func TestScrapeRefusedByInFlightLimitTakesNoGzipWriter(t *testing.T) {
	held := heldCollector{entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(held)
	h := testHandler(t, reg, testHTTPOptions, nil)
	gzip := http.Header{"Accept-Encoding": {"gzip"}}

	var wg sync.WaitGroup
	codes := make(chan int, maxRequestsInFlight)
	for range maxRequestsInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(h, "GET", "/metrics", gzip).Code
		}()
	}
	for range maxRequestsInFlight {
		<-held.entered
	}
	before := gzipresponse.WritersTaken()
	for range 20 {
		rec := serve(h, "GET", "/metrics", gzip)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("a scrape beyond %d in flight answered %d; want 503", maxRequestsInFlight, rec.Code)
		}
	}
	if taken := gzipresponse.WritersTaken() - before; taken != 0 {
		t.Errorf("20 refused scrapes took %d gzip writers; want 0", taken)
	}
	close(held.release)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a scrape within the limit answered %d", code)
		}
	}
}
