package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/internal/gzipresponse"
)

// The HTTP surface: its flags, checked when they are parsed, and the handler that serves
// the metrics, health, readiness, reload and landing pages (docs/security.md).

// httpOptions are the flags of the HTTP surface.
type httpOptions struct {
	metricsPath     string
	enablePprof     bool
	enableLifecycle bool
	maxConnections  int
}

// defaultMaxConnections is --web.max-connections' default. A scrape needs one connection
// (two for a Prometheus HA pair, a few more for federation or a person with curl); 64 is
// room for all of them many times over, and 64 idle connections cost about 1.3 MB and 64
// descriptors, where 3,000 cost 60 MB and 3,000.
const defaultMaxConnections = 64

// maxRequestsInFlight bounds the scrapes served at once; each holds a gzip writer (about
// 1.2 MiB) and a gathering of every metric.
const maxRequestsInFlight = 10

// check refuses, as a usage error, flags the HTTP surface cannot serve.
func (o httpOptions) check() error {
	if err := checkTelemetryPath(o.metricsPath); err != nil {
		return fmt.Errorf("--web.telemetry-path=%q: %w", o.metricsPath, err)
	}
	if o.maxConnections < 1 {
		return fmt.Errorf("--web.max-connections=%d: must be at least 1", o.maxConnections)
	}
	return nil
}

// checkTelemetryPath refuses a metrics path that would collide with the exporter's own
// endpoints or that the HTTP router cannot take as a literal path (it panicked on
// /-/healthy and on a path without a leading '/').
func checkTelemetryPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("must start with '/'")
	}
	if i := strings.IndexFunc(p, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("/-._~", r)
	}); i >= 0 {
		return fmt.Errorf("%q: only letters, digits and / - . _ ~ are allowed", []rune(p[i:])[0])
	}
	if path.Clean(p) != p {
		return errors.New("must be a clean path (no trailing '/', no '//', '.' or '..')")
	}
	switch {
	case p == "/":
		return errors.New("is the landing page")
	case p == "/-" || strings.HasPrefix(p, "/-/"):
		return errors.New("/-/ is the exporter's own (/-/healthy, /-/ready, /-/reload)")
	case p == "/debug/pprof" || strings.HasPrefix(p, "/debug/pprof/"):
		return errors.New("/debug/pprof/ is the Go profiles' (--web.enable-pprof)")
	}
	return nil
}

func newHandler(reg *prometheus.Registry, opts httpOptions, ready func() error, reload func() error, logger *slog.Logger) (http.Handler, error) {
	if err := checkTelemetryPath(opts.metricsPath); err != nil {
		return nil, fmt.Errorf("telemetry path %q: %w", opts.metricsPath, err)
	}
	mux := http.NewServeMux()
	// The in-flight limit outside the compression, not promhttp's inside it: a refused
	// scrape must not take a gzip writer (1.2 MiB when the pool has none spare).
	mux.Handle("GET "+opts.metricsPath, limitInFlight(maxRequestsInFlight, gzipresponse.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError),
		// The text format, not OpenMetrics: nothing exposed here needs what OpenMetrics
		// adds (exemplars, created samples), and node_exporter serves text too.
		EnableOpenMetrics:  false,
		Timeout:            30 * time.Second,
		DisableCompression: true, // gzipresponse compresses, at the fastest level
	}))))
	mux.HandleFunc("GET /-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("GET /-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "Not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "Ready")
	})
	mux.Handle("POST /-/reload", reloadHandler(opts.enableLifecycle, reload))
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "diskprobe_exporter",
		Description: "Disk latency prober: etcd-WAL-like fdatasync, O_DIRECT random reads, sequential throughput",
		Version:     version.Info(),
		Profiling:   strconv.FormatBool(opts.enablePprof), // the toolkit links /debug/pprof/ unless told not to
		Links: []web.LandingLinks{
			{Address: opts.metricsPath, Text: "Metrics"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Readiness"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("landing page: %w", err)
	}
	mux.Handle("GET /{$}", landing)
	if opts.enablePprof {
		servePprof(mux)
	}
	return mux, nil
}

// reloadHandler serves POST /-/reload: 403 unless --web.enable-lifecycle, as Prometheus
// and Alertmanager answer. A browser's cross-site request is refused too (Sec-Fetch-Site,
// Origin): a page an operator visits must not reload the exporter on their behalf. A
// failed reload answers without its errors: they name files and paths of the host, which
// the log has and whoever can reach the port need not.
func reloadHandler(enabled bool, reload func() error) http.Handler {
	if !enabled {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Lifecycle API is not enabled.", http.StatusForbidden)
		})
	}
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch err := reload(); {
		case errors.Is(err, collector.ErrStopped):
			http.Error(w, "shutting down; not reloaded", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, "failed to reload config; see the exporter's log", http.StatusInternalServerError)
		default:
			_, _ = fmt.Fprintln(w, "Reloaded")
		}
	}))
}

// limitInFlight serves at most n requests of h at once, answering the rest 503 at once,
// as promhttp's MaxRequestsInFlight does.
func limitInFlight(n int, h http.Handler) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", n), http.StatusServiceUnavailable)
		}
	})
}
