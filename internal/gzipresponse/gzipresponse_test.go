package gzipresponse

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler, acceptEncoding string) *http.Response {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	Handler(h).ServeHTTP(rec, req)
	return rec.Result()
}

func TestGzipWhenAccepted(t *testing.T) {
	body := strings.Repeat("diskprobe_fdatasync_duration_seconds_bucket{le=\"0.01\"} 42\n", 1000)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, body) // a failed write shows as a short body below
	})
	resp := serve(t, h, "gzip")
	if got := resp.Header.Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", got)
	}
	if got := resp.Header.Get("Vary"); got != "Accept-Encoding" {
		t.Errorf("Vary %q, want Accept-Encoding", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "text/plain; version=0.0.4" {
		t.Errorf("Content-Type %q lost", got)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != body {
		t.Errorf("decompressed body differs: %d bytes, want %d", len(plain), len(body))
	}

	resp = serve(t, h, "")
	if got := resp.Header.Get("Content-Encoding"); got != "" {
		t.Errorf("Content-Encoding %q without Accept-Encoding", got)
	}
	if plain, _ := io.ReadAll(resp.Body); string(plain) != body {
		t.Errorf("identity body differs")
	}
}

// An error from the wrapped handler (promhttp's 503 when over its in-flight limit) keeps
// its status and a body that decompresses, without the uncompressed Content-Length.
func TestGzipKeepsErrorStatus(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "99")
		http.Error(w, "Limit of concurrent requests reached (10), try again later.", http.StatusServiceUnavailable)
	})
	resp := serve(t, h, "gzip, deflate")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Length"); got != "" {
		t.Errorf("Content-Length %q passed through", got)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); !strings.Contains(string(plain), "Limit of concurrent requests") {
		t.Errorf("body %q", plain)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                             false,
		"gzip":                         true,
		"GZIP":                         true,
		"deflate, gzip;q=1.0, *;q=0.5": true,
		"gzip;q=0":                     false,
		"gzip; q=0.001":                true,
		"identity":                     false,
		"*":                            true,
		"br, zstd":                     false,
		"x-gzip":                       false,
	} {
		if got := AcceptsGzip(header); got != want {
			t.Errorf("AcceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}

// A gzip writer back in the pool that still pointed at its last response would keep that
// response (and its connection's buffers) alive until the pool is next emptied, two
// garbage collections later. After one, the response must be gone.
func TestPooledWriterDoesNotKeepTheLastResponseAlive(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "diskprobe_probe_runs_total 1\n")
	})
	collected := make(chan struct{})
	func() {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		runtime.AddCleanup(rec, func(c chan struct{}) { close(c) }, collected)
		Handler(h).ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatal("response not gzipped")
		}
	}()
	runtime.GC() // one cycle: what the pool holds survives it in the pool's victim cache
	select {
	case <-collected:
	case <-time.After(5 * time.Second):
		t.Fatal("the response was still reachable after the handler returned and a garbage collection: the pooled gzip writer holds it")
	}
}
