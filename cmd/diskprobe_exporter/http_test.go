package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

func TestReloadNeedsLifecycleFlagAndAnswersWithoutTheError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reloads := 0
	var reloadErr error
	reload := func() error { reloads++; return reloadErr }

	off := testHandler(t, reg, testHTTPOptions, reload)
	if rec := serve(off, "POST", "/-/reload", nil); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "Lifecycle API is not enabled.") {
		t.Errorf("POST /-/reload without --web.enable-lifecycle: %d %q; want 403 %q", rec.Code, rec.Body, "Lifecycle API is not enabled.")
	}
	if reloads != 0 {
		t.Errorf("reloaded %d times without --web.enable-lifecycle", reloads)
	}

	opts := testHTTPOptions
	opts.enableLifecycle = true
	on := testHandler(t, reg, opts, reload)
	if rec := serve(on, "POST", "/-/reload", nil); rec.Code != http.StatusOK || reloads != 1 {
		t.Errorf("POST /-/reload with --web.enable-lifecycle: %d %q, %d reloads; want 200 and 1", rec.Code, rec.Body, reloads)
	}
	reloadErr = errors.New("/etc/diskprobe_exporter/diskprobe.yml:4: targets[0].path: /srv/secret-data does not exist")
	rec := serve(on, "POST", "/-/reload", nil)
	if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "/") {
		t.Errorf("a failed reload answered %d %q; want 500 naming no file or path", rec.Code, rec.Body)
	}
	// A page on another site, in an operator's browser.
	before := reloads
	rec = serve(on, "POST", "/-/reload", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
	if rec.Code != http.StatusForbidden || reloads != before {
		t.Errorf("a cross-site POST /-/reload answered %d and reloaded %d times; want 403 and none", rec.Code, reloads-before)
	}
}

// A telemetry path of /-/healthy, or one without a leading '/', made the HTTP router panic
// at start, after the probes had started. They are usage errors now.
func TestTelemetryPathsTheRouterCannotTakeAreRefused(t *testing.T) {
	for _, p := range []string{"", "metrics", "/", "/-/healthy", "/-/ready", "/-/reload", "/-/", "/debug/pprof/", "/debug/pprof/heap",
		"/debug/pprof", "/metrics/", "//metrics", "/a/../metrics", "/metrics/{x}", "/metrics{", "/a b", "/metrics\n", "/met%72ics"} {
		opts := testHTTPOptions
		opts.metricsPath = p
		err := opts.check()
		if err == nil {
			t.Errorf("--web.telemetry-path=%q accepted", p)
			continue
		}
		if !strings.HasPrefix(err.Error(), "--web.telemetry-path=") {
			t.Errorf("--web.telemetry-path=%q: %v; want the flag named", p, err)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("newHandler panicked on %q: %v", p, r)
				}
			}()
			if _, err := newHandler(prometheus.NewRegistry(), opts, nil, nil, slog.New(slog.DiscardHandler)); err == nil {
				t.Errorf("newHandler took %q", p)
			}
		}()
	}
	for _, p := range []string{"/metrics", "/probe/metrics", "/v1.2/metrics_x-y~z"} {
		opts := testHTTPOptions
		opts.metricsPath = p
		if err := opts.check(); err != nil {
			t.Errorf("--web.telemetry-path=%q refused: %v", p, err)
			continue
		}
		if rec := serve(testHandler(t, prometheus.NewRegistry(), opts, nil), "GET", p, nil); rec.Code != http.StatusOK {
			t.Errorf("GET %s with --web.telemetry-path=%s: %d", p, p, rec.Code)
		}
	}
}

// FuzzHandler feeds arbitrary requests to the HTTP handlers, and arbitrary telemetry paths
// to newHandler: no panic, and an answer from a known set. A path the flag check takes
// must make a handler that serves metrics there.
func FuzzHandler(f *testing.F) {
	f.Add("/metrics", "GET", "/metrics", "gzip", "", "")
	f.Add("/metrics", "POST", "/-/reload", "", "cross-site", "body")
	f.Add("/metrics", "HEAD", "/", "*;q=0", "", "")
	f.Add("/probe", "GET", "/-/ready", "gzip;q=0.5, deflate", "same-origin", "")
	f.Add("/-/healthy", "GET", "/debug/pprof/", "", "", "")
	f.Add("metrics", "PUT", "/metrics/../-/reload", "identity", "none", "x")
	known := map[int]bool{200: true, 301: true, 307: true, 400: true, 403: true, 404: true, 405: true, 500: true, 503: true}
	f.Fuzz(func(t *testing.T, metricsPath, method, target, acceptEncoding, fetchSite, body string) {
		// Not pprof: its CPU profile and trace run for seconds, and they are the runtime's.
		opts := httpOptions{metricsPath: metricsPath, maxConnections: 1, enableLifecycle: len(body)%2 == 1}
		h, err := newHandler(prometheus.NewRegistry(), opts, func() error { return nil }, func() error {
			if len(body) > 4 {
				return errors.New("/secret/path: bad")
			}
			return nil
		}, slog.New(slog.DiscardHandler))
		if checkErr := opts.check(); (checkErr == nil) != (err == nil) {
			t.Fatalf("telemetry path %q: the flag check says %v, newHandler %v", metricsPath, checkErr, err)
		}
		if err != nil {
			return
		}
		req, err := http.NewRequest(method, "http://x"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Accept-Encoding", acceptEncoding)
		req.Header.Set("Sec-Fetch-Site", fetchSite)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !known[rec.Code] {
			t.Fatalf("%s %q: %d", method, target, rec.Code)
		}
		if req.Method == "GET" && req.URL.Path == metricsPath && req.URL.RawPath == "" && rec.Code != http.StatusOK {
			t.Fatalf("GET %q with --web.telemetry-path=%q: %d", target, metricsPath, rec.Code)
		}
		if strings.Contains(rec.Body.String(), "/secret/path") {
			t.Fatalf("%s %q answered a reload error's path: %q", method, target, rec.Body)
		}
	})
}
