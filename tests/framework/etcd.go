package framework

import (
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// Etcd is a single-member etcd (Debian's etcd-server) on loopback ports, for tests that
// must see what etcd itself does on a disk.
type Etcd struct {
	ClientURL string
	Log       *testenv.SyncBuffer
	cmd       *exec.Cmd
	done      chan struct{}
}

// StartEtcd runs etcd with its data directory at dataDir until Stop or cleanup (killed by
// its own pid), and waits until it answers /health.
func StartEtcd(t testing.TB, dataDir string, extraArgs ...string) *Etcd {
	t.Helper()
	testenv.RequireTools(t, "etcd")
	client, peer := "http://"+FreePort(t), "http://"+FreePort(t)
	e := &Etcd{ClientURL: client, Log: &testenv.SyncBuffer{}, done: make(chan struct{})}
	args := append([]string{
		"--name=diskprobe-test",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=diskprobe-test=" + peer,
		"--initial-cluster-state=new",
	}, extraArgs...)
	e.cmd = exec.Command("etcd", args...)
	e.cmd.Stdout, e.cmd.Stderr = e.Log, e.Log
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("etcd log:\n%s", e.Log.String())
		}
	})
	testenv.WaitFor(t, 30*time.Second, "etcd healthy", func() bool {
		select {
		case <-e.done:
			t.Fatalf("etcd exited: %v\n%s", e.cmd.ProcessState, e.Log.String())
		default:
		}
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return e
}

// Stop ends etcd (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (e *Etcd) Stop() {
	select {
	case <-e.done:
		return
	default:
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		e.cmd.Process.Kill()
		<-e.done
	}
}

// Pid is etcd's process id.
func (e *Etcd) Pid() int { return e.cmd.Process.Pid }
