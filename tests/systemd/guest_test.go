package systemd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// need skips the test saying why, or fails it where DISKPROBE_TOOLS_REQUIRED=1 says the
// tier must run.
func need(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(framework.ToolsRequiredEnv) == "1" {
		t.Fatalf("%s, and %s=1 says this tier must run", msg, framework.ToolsRequiredEnv)
	}
	t.Skip(msg)
}

// guest is a Debian system booted with systemd-nspawn, its systemd as PID 1.
type guest struct {
	t    *testing.T
	dir  string // its root directory on the host
	pid1 int    // its PID 1, as the host sees it
	name string
}

// guestPath is the environment commands in the guest run with: nothing of the host's.
var guestEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "HOME=/root"}

// boot copies the cached root and boots it: `systemd-nspawn -b` unregistered (the host's PID 1
// need not be systemd), with a network namespace of its own and the host's device nodes
// devices bound in. Cleanup powers it off (killing nspawn if it does not end) and removes
// the copy.
func boot(t *testing.T, cached string, devices ...string) *guest {
	t.Helper()
	parent := os.Getenv("DISKPROBE_SYSTEMD_TMP")
	if parent == "" {
		parent = "/var/tmp" // a disk, not a tmpfs: the root is ~150 MiB and the probes write files
	}
	tmp, err := os.MkdirTemp(parent, "diskprobe-systemd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(tmp); err != nil {
			t.Errorf("cleanup: remove %s: %v", tmp, err)
		}
	})
	dir := filepath.Join(tmp, "root")
	start := time.Now()
	if out, err := exec.Command("cp", "-a", "--reflink=auto", cached, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the cached root: %v\n%s", err, out)
	}
	t.Logf("copied %s: %.1fs", cached, time.Since(start).Seconds())

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	g := &guest{t: t, dir: dir, name: "diskprobe-test-" + hex.EncodeToString(suffix)}
	logFile, err := os.Create(filepath.Join(tmp, "nspawn.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-b", "-D", dir, "--register=no", "--keep-unit", "--private-network", "--machine=" + g.name, "--console=passive"}
	for _, d := range devices {
		args = append(args, "--bind="+d)
	}
	nspawn := exec.Command("systemd-nspawn", args...)
	nspawn.Stdout, nspawn.Stderr = logFile, logFile
	nspawn.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := nspawn.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- nspawn.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		if g.pid1 != 0 {
			_, _ = g.run(30*time.Second, "systemctl", "poweroff")
		}
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("cleanup: the guest did not power off within 60 s; killing systemd-nspawn (pid %d)", nspawn.Process.Pid)
			_ = nspawn.Process.Kill()
			<-done
		}
		if b, err := os.ReadFile(filepath.Join(tmp, "nspawn.log")); err == nil && t.Failed() {
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("systemd-nspawn's output, last lines:\n%s", strings.Join(lines, "\n"))
		}
	})

	// The guest's PID 1: the process whose innermost PID is 1 and whose ancestor is nspawn.
	deadline := time.Now().Add(time.Minute)
	for g.pid1 == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no PID 1 under systemd-nspawn within a minute")
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(filepath.Join(tmp, "nspawn.log"))
			t.Fatalf("systemd-nspawn exited: %v\n%s", err, b)
		case <-time.After(200 * time.Millisecond):
		}
		g.pid1 = findPID1(nspawn.Process.Pid)
	}
	// Booted: systemd says running (or degraded: a unit of the minimal system failed).
	var state string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, _ := g.run(30*time.Second, "systemctl", "is-system-running")
		state = strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			failed, _ := g.run(30*time.Second, "systemctl", "--failed", "--no-legend")
			t.Fatalf("the guest's systemd is %q after 2 minutes; failed units:\n%s", state, failed)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if state == "degraded" {
		failed, _ := g.run(30*time.Second, "systemctl", "--failed", "--no-legend")
		t.Logf("the guest booted degraded:\n%s", failed)
	}
	t.Logf("booted %s (PID 1 = host pid %d, %s): %.1fs", g.name, g.pid1, state, time.Since(start).Seconds())
	return g
}

// findPID1 returns the host pid of the process below ancestor whose innermost pid is 1.
func findPID1(ancestor int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var nspid []string
		ppid := 0
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				nspid = strings.Fields(v)
			}
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
			continue
		}
		for p := ppid; p > 1; p = parentOf(p) {
			if p == ancestor {
				return pid
			}
		}
	}
	return 0
}

func parentOf(pid int) int {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			p, _ := strconv.Atoi(strings.TrimSpace(v))
			return p
		}
	}
	return 0
}

// run runs a command in the guest: every namespace of its PID 1, its root and its cgroup.
func (g *guest) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append([]string{"-t", strconv.Itoa(g.pid1), "-a", "--", "env", "-i"}, guestEnv...)
	argv = append(argv, name)
	cmd := exec.CommandContext(ctx, "nsenter", append(argv, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sh runs a shell script in the guest and fails the test if it fails.
func (g *guest) sh(script string) string {
	g.t.Helper()
	out, err := g.run(5*time.Minute, "/bin/sh", "-ec", script)
	if err != nil {
		g.t.Fatalf("in the guest: %s: %v\n%s", script, err, out)
	}
	return out
}

// get fetches a URL from inside the guest's network namespace with the host's curl (a
// minimal Debian has none).
func (g *guest) get(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(g.pid1), "-n", "--",
		"curl", "-sS", "--fail", "--max-time", "10", url).CombinedOutput()
	return string(out), err
}

// waitFor polls cond until it holds, failing the test with its last account after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	var last string
	for {
		var ok bool
		if ok, last = cond(); ok {
			t.Logf("%s: %.1fs", what, time.Since(start).Seconds())
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s; last:\n%s", what, timeout, last)
		}
		time.Sleep(time.Second)
	}
}
