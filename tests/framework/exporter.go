package framework

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ExporterOptions start the exporter in surroundings StartExporter does not cover: as
// another user, or behind TLS where the plain-HTTP readiness check cannot reach it.
type ExporterOptions struct {
	Args []string
	// Credential runs the exporter as this user and group. The binary is then copied
	// into a directory that user can enter; the config file and the targets must be
	// readable (and writable, for directories) by that user, which is the caller's job.
	Credential *syscall.Credential
	// AmbientCaps are capabilities the exporter keeps as that user (as systemd's
	// AmbientCapabilities= gives them).
	AmbientCaps []uintptr
	// Ready reports whether the exporter at addr is ready; the default asks for
	// http://addr/-/ready and wants 200.
	Ready func(addr string) bool
}

// StartExporterWith is StartExporter with options. The exporter is killed (by its own
// pid) in cleanup and its log printed when the test failed.
func StartExporterWith(t testing.TB, configFile string, opts ExporterOptions) *Exporter {
	t.Helper()
	bin := testenv.Binary(t)
	if opts.Credential != nil {
		bin = BinaryForUser(t, bin)
	}
	ready := opts.Ready
	if ready == nil {
		ready = func(addr string) bool {
			resp, err := http.Get("http://" + addr + "/-/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	e := &Exporter{t: t, Addr: FreePort(t), Log: NewProcessLog(t), done: make(chan struct{})}
	e.Cmd = exec.Command(bin, append([]string{"--config.file=" + configFile, "--web.listen-address=" + e.Addr, "--log.level=debug"}, opts.Args...)...)
	e.Cmd.Stdout, e.Cmd.Stderr = e.Log.File(), e.Log.File()
	if opts.Credential != nil {
		e.Cmd.SysProcAttr = &syscall.SysProcAttr{Credential: opts.Credential, AmbientCaps: opts.AmbientCaps}
		e.Cmd.Dir = "/"
	}
	if err := e.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.Cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		e.Cmd.Process.Kill()
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("exporter log:\n%s", e.Log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !ready(e.Addr) {
		select {
		case <-e.done:
			t.Fatalf("exporter exited before becoming ready: %v\n%s", e.Cmd.ProcessState, e.Log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("exporter not ready after 20s\n%s", e.Log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return e
}

// BinaryForUser copies the exporter binary into a world-searchable temporary directory,
// for a test that runs it as another user: Binary's own directory is private to root.
func BinaryForUser(t testing.TB, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "diskprobe-bin-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(bin))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// WriteConfig writes a configuration file into a temporary directory.
func WriteConfig(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "diskprobe.yml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FreePort returns a loopback address with a port nobody listens on.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Exporter is a running exporter process.
type Exporter struct {
	t    testing.TB
	Cmd  *exec.Cmd
	Addr string
	Log  *ProcessLog
	done chan struct{}
}

// StartExporter runs the real binary on configFile, listening on a free loopback port,
// and waits until /-/ready answers. It is killed (by its own pid) in cleanup, and its
// log is printed when the test failed.
func StartExporter(t testing.TB, configFile string, args ...string) *Exporter {
	t.Helper()
	return StartExporterWith(t, configFile, ExporterOptions{Args: args})
}

// Pid is the exporter's process id.
func (e *Exporter) Pid() int { return e.Cmd.Process.Pid }

// Done is closed when the process has exited.
func (e *Exporter) Done() <-chan struct{} { return e.done }

// Signal sends sig to the exporter.
func (e *Exporter) Signal(sig syscall.Signal) { e.Cmd.Process.Signal(sig) }

// scrapeClient keeps no connection open between scrapes: an idle keep-alive connection
// is a goroutine in the exporter, and tests that compare go_goroutines before and during a
// hang saw one or two of them come and go (13 → 15 with nothing leaked).
var scrapeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Scrape fetches and parses /metrics with a timeout, returning the families by name.
func (e *Exporter) Scrape(timeout time.Duration) (map[string]*dto.MetricFamily, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Addr+"/metrics", nil)
	start := time.Now()
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, time.Since(start), err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	return families, time.Since(start), err
}

// MustScrape is Scrape that fails the test on error.
func (e *Exporter) MustScrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	f, _, err := e.Scrape(5 * time.Second)
	if err != nil {
		e.t.Fatalf("scrape: %v", err)
	}
	return f
}

// Value is the value of the sample of family name whose labels include want (a counter,
// gauge or untyped value, or a histogram's sample count); ok is false when none matches.
func Value(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// WaitMetric scrapes until cond holds on a scrape, and returns that scrape.
func WaitMetric(t testing.TB, e *Exporter, timeout time.Duration, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var last map[string]*dto.MetricFamily
	testenv.WaitFor(t, timeout, what, func() bool {
		f, _, err := e.Scrape(5 * time.Second)
		if err != nil {
			return false
		}
		last = f
		return cond(f)
	})
	return last
}
