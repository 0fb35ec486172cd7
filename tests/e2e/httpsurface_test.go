package e2e

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
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
