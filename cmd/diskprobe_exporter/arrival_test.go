package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi"
	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi/kubeapitest"
)

// The arrival command against a fake API server: it serves every class's series, times an
// attempt of the first class (the second's is half an --interval later), and exits 0 on
// SIGTERM. A diagnostic of the wiring; the cluster tier runs it against a real cluster.
func TestArrivalCommandServesItsMetrics(t *testing.T) {
	f := kubeapitest.New()
	f.PVCPhase = func(gets int) string { return map[bool]string{true: "Bound", false: "Pending"}[gets > 1] }
	f.PodStatus = func(gets int) kubeapi.PodStatus {
		return kubeapi.PodStatus{Phase: map[bool]string{true: "Succeeded", false: "Running"}[gets > 1]}
	}
	dir := f.Serve(t) // and the environment, which the command inherits
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()

	args := "arrival --storage-class=fast --storage-class=slow --image=img --interval=1h --timeout=1m" +
		" --owner-pod-name=arrival-0 --owner-pod-uid=uid-0 --kubernetes.service-account-dir=" + dir + " --web.listen-address=" + addr
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DISKPROBE_TEST_RUN_MAIN=1", "DISKPROBE_TEST_ARGS="+args)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	want := []string{
		`diskprobe_storageclass_arrival_seconds_count{stage="deleted",storage_class="fast"} 1`,
		`diskprobe_storageclass_arrival_seconds_count{stage="bound",storage_class="slow"} 0`,
		`diskprobe_storageclass_arrival_failures_total{stage="create",storage_class="slow"} 0`,
		`diskprobe_storageclass_arrival_attempts_total{storage_class="fast"} 1`,
	}
	var metrics string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			metrics = string(b)
		}
		missing := false
		for _, w := range want {
			missing = missing || !strings.Contains(metrics, w+"\n")
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has not %q after 60s:\n%s\nstderr:\n%s", want, metrics, stderr.String())
		}
	}
	if pod := f.LastPod(); pod == nil || !pod.Metadata.OwnedBy("uid-0") {
		t.Errorf("the writer pod %+v has no owner reference to --owner-pod-uid", pod)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("arrival after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("arrival still running 30s after SIGTERM; stderr:\n%s", stderr.String())
	}
}

// The writer pod's command: one line, exit 0, nothing left in the directory.
func TestArrivalWrite(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runMain(t, "arrival-write", dir)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "wrote 4096 bytes to "+filepath.Join(dir, ".diskprobe-arrival")) {
		t.Errorf("arrival-write %s: exit %d, stdout %q, stderr %q; want one line, exit 0", dir, code, out, errOut)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %v in the volume", left)
	}
}

// A volume it cannot write in: exit 1 and the reason, naming the file.
func TestArrivalWriteReadOnly(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// Root writes through permissions: a read-only mount, as a volume mounted ro.
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	} else if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runMain(t, "arrival-write", dir)
	want := filepath.Join(dir, ".diskprobe-arrival")
	saysWhy := strings.Contains(errOut, "read-only file system") || strings.Contains(errOut, "permission denied")
	if code != 1 || !strings.Contains(errOut, want) || !saysWhy {
		t.Errorf("arrival-write on a read-only directory: exit %d, stderr %q; want 1 and the reason naming %s", code, errOut, want)
	}
}

// The arrival command's usage errors exit 2 naming the flag; serve's flags are refused.
func TestArrivalUsageErrors(t *testing.T) {
	for args, want := range map[string]string{
		"arrival --image=i": "--storage-class",
		"arrival --storage-class=a --storage-class=a --image=i":          "given twice",
		"arrival --storage-class=a --image=i --size=lots":                "--size",
		"arrival --storage-class=a --image=i --owner-pod-name=p":         "--owner-pod-uid",
		"arrival --storage-class=a --image=i --config.file=x.yml":        "--config.file is the exporter's flag",
		"arrival --storage-class=a --image=i --access-mode=ReadOnlyMany": "access-mode",
	} {
		_, errOut, code := runMain(t, strings.Fields(args)...)
		if code != exitError || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, stderr %q; want %d naming %s", args, code, errOut, exitError, want)
		}
	}
}

// A class probe pod's init container: a volume root writable by all gets a probe root the
// exporter accepts, and says so in one line; a missing volume exits 1 naming it.
func TestVolumePrepare(t *testing.T) {
	vol := t.TempDir()
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runMain(t, "volume-prepare", vol)
	root := filepath.Join(vol, "diskprobe")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, root) {
		t.Errorf("volume-prepare %s: exit %d, stdout %q, stderr %q; want one line naming %s, exit 0", vol, code, out, errOut, root)
	}
	if st, err := os.Stat(root); err != nil || st.Mode().Perm()&0o022 != 0 {
		t.Errorf("%s: %v, %v; want a directory only its owner writes", root, st, err)
	}
	missing := filepath.Join(vol, "missing")
	if _, errOut, code := runMain(t, "volume-prepare", missing); code != 1 || !strings.Contains(errOut, missing) {
		t.Errorf("volume-prepare on a missing volume: exit %d, stderr %q; want 1 naming it", code, errOut)
	}
}
