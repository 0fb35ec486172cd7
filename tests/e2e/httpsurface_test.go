package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestReloadEndpointNeedsLifecycleFlag: POST /-/reload was always on, unauthenticated and
// callable cross-site from an admin's browser. Without --web.enable-lifecycle it answers
// 403 as Prometheus does and reloads nothing; with it, it reloads; SIGHUP reloads either way.
func TestReloadEndpointNeedsLifecycleFlag(t *testing.T) {
	off := startIdle(t)
	code, body := post(t, "http://"+off.Addr+"/-/reload")
	if code != http.StatusForbidden || !strings.Contains(body, "Lifecycle API is not enabled.") {
		t.Errorf("POST /-/reload without --web.enable-lifecycle: %d %q; want 403 %q", code, body, "Lifecycle API is not enabled.")
	}
	off.Signal(syscall.SIGHUP)
	testenv.WaitFor(t, 10*time.Second, "SIGHUP's reload without --web.enable-lifecycle", func() bool {
		return len(logLines(off, "configuration reloaded")) == 1
	})

	on := startIdle(t, "--web.enable-lifecycle")
	if code, body := post(t, "http://"+on.Addr+"/-/reload"); code != http.StatusOK {
		t.Errorf("POST /-/reload with --web.enable-lifecycle: %d %q; want 200", code, body)
	}
	testenv.WaitFor(t, 5*time.Second, "the reload in the log", func() bool {
		return len(logLines(on, "configuration reloaded")) == 1
	})
}

// runExporter runs the binary with args until it exits (within 20 s), with its working
// directory in a fresh temporary directory.
func runExporter(t *testing.T, args ...string) (exit int, output string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Binary(t), args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// quietConfig is a configuration with one directory target, and that directory.
func quietConfig(t *testing.T) (cfg, dir string) {
	dir = t.TempDir()
	return framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: quiet\n    path: %s\n    fsync: {interval: 1s, ops: 1, block_size: 4KiB, file_size: 1MiB}\n    limits: {min_free: 0}\n", dir)), dir
}

func assertNoProbeDir(t *testing.T, dir, after string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dir, ".diskprobe")); !os.IsNotExist(err) {
		t.Errorf("%s: the target's .diskprobe was created (%v): probes started", after, err)
	}
}

// TestBadTelemetryPathIsAUsageError: a --web.telemetry-path of /-/healthy, or without a
// leading '/', made the HTTP router panic, after the probes had started. It is a usage
// error now (exit 2, as every other), and nothing is probed.
func TestBadTelemetryPathIsAUsageError(t *testing.T) {
	cfg, dir := quietConfig(t)
	for _, p := range []string{"/-/healthy", "metrics", "/", "/debug/pprof/heap", "/metrics/{x}"} {
		exit, out := runExporter(t, "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t), "--web.telemetry-path="+p)
		if exit != 2 || !strings.Contains(out, "--web.telemetry-path=") || strings.Contains(out, "panic") {
			t.Errorf("--web.telemetry-path=%s: exit %d\n%s\nwant exit 2 naming the flag, no panic", p, exit, out)
		} else {
			t.Logf("--web.telemetry-path=%s: %s", p, strings.TrimSpace(out))
		}
	}
	assertNoProbeDir(t, dir, "a bad telemetry path")
}

// TestBadWebConfigStopsTheStartNamingTheFile: a web configuration that does not load was
// reported without its file's name, after the probes had started. It is checked first now.
func TestBadWebConfigStopsTheStartNamingTheFile(t *testing.T) {
	cfg, dir := quietConfig(t)
	webDir := t.TempDir()
	typo := filepath.Join(webDir, "web-typo.yml")
	if err := os.WriteFile(typo, []byte("basic_auth_user:\n  prometheus: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noCert := filepath.Join(webDir, "web-nocert.yml")
	if err := os.WriteFile(noCert, []byte("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{typo, noCert, filepath.Join(webDir, "absent.yml")} {
		exit, out := runExporter(t, "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t), "--web.config.file="+file)
		if exit == 0 || !strings.Contains(out, "--web.config.file="+file) {
			t.Errorf("--web.config.file=%s: exit %d\n%s\nwant non-zero, naming the file", filepath.Base(file), exit, out)
		} else {
			t.Logf("%s: exit %d: %s", filepath.Base(file), exit, lastLine(out))
		}
	}
	assertNoProbeDir(t, dir, "a bad web configuration")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
