package testenv

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
	bin := Binary(t)
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
	e := &Exporter{t: t, Addr: FreePort(t), Log: &SyncBuffer{}, done: make(chan struct{})}
	e.Cmd = exec.Command(bin, append([]string{"--config.file=" + configFile, "--web.listen-address=" + e.Addr, "--log.level=debug"}, opts.Args...)...)
	e.Cmd.Stdout, e.Cmd.Stderr = e.Log, e.Log
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
