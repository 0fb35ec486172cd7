package k8senv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// teardown stops the cluster and removes everything it made, then releases the lock.
func (c *Cluster) teardown() error {
	teardownMu.Lock()
	defer teardownMu.Unlock()
	err := c.cleanState()
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
	mu.Lock()
	if cluster == c {
		cluster = nil
	}
	mu.Unlock()
	return err
}

// cleanState tears down what StateDir records, whether this process or a killed one made
// it: the kubelet first (so it restarts nothing), then every container, containerd, the
// control plane and etcd (each by the pid it was started with), then the mounts, network
// namespaces, bridge, cgroups and sysctls.
func (c *Cluster) cleanState() error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	note(stopPid(c.path("pid", "kubelet"), c.procs))
	sock := filepath.Join(RunDir, "containerd.sock")
	if alive(c.path("pid", "containerd")) {
		note(removeContainers(sock))
	}
	for _, n := range []string{"containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		note(stopPid(c.path("pid", n), c.procs))
	}
	note(killShims(sock))
	note(unmountUnder(StateDir, RunDir))
	before := readLines(c.path("netns-before"))
	for _, ns := range cniNetns() {
		if before[ns] {
			continue
		}
		_ = syscall.Unmount(ns, syscall.MNT_DETACH)
		note(os.Remove(ns))
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		if out, err := exec.Command("ip", "link", "delete", Bridge).CombinedOutput(); err != nil {
			note(fmt.Errorf("ip link delete %s: %v: %s", Bridge, err, out))
		}
	}
	note(removeKubepods())
	note(removeHostState(c.path("host-before")))
	note(restoreSysctls(c.path("sysctls")))
	if len(errs) == 0 {
		note(os.RemoveAll(StateDir))
		note(os.RemoveAll(RunDir))
	}
	return errors.Join(errs...)
}

func pidOf(pidFile string) int {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

func alive(pidFile string) bool {
	pid := pidOf(pidFile)
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// stopPid ends the process recorded in pidFile: SIGTERM, SIGKILL after 15 s. A process of
// this binary is waited for; one a killed run left is polled for (it is not our child).
func stopPid(pidFile string, procs []*daemon) error {
	pid := pidOf(pidFile)
	if pid <= 0 {
		return nil
	}
	var done chan struct{}
	for _, d := range procs {
		if d.cmd.Process.Pid == pid {
			done = d.done
		}
	}
	if done == nil {
		// Left by a killed run: make sure the pid is still that daemon (its state dir is
		// in its command line) before signalling it.
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.Contains(string(cmdline), StateDir) && !strings.Contains(string(cmdline), RunDir) {
			return os.Remove(pidFile)
		}
		done = make(chan struct{})
		go func() {
			for syscall.Kill(pid, 0) == nil {
				if s, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(s), ") Z ") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			close(done)
		}()
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("pid %d (%s) did not exit after SIGKILL", pid, filepath.Base(pidFile))
		}
	}
	return os.Remove(pidFile)
}

// removeContainers kills and deletes every task and container in containerd's k8s.io
// namespace (the CRI's), sandboxes included.
func removeContainers(sock string) error {
	ctr := func(args ...string) (string, error) {
		out, err := exec.Command("ctr", append([]string{"--address", sock, "-n", "k8s.io", "--timeout", "30s"}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := ctr("containers", "list", "-q")
	if err != nil {
		return fmt.Errorf("ctr containers list: %v: %s", err, out)
	}
	var errs []error
	for _, id := range strings.Fields(out) {
		_, _ = ctr("tasks", "kill", "-s", "SIGKILL", id)
		for i := 0; i < 50; i++ {
			if o, err := ctr("tasks", "delete", "--force", id); err == nil || strings.Contains(o, "not found") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if o, err := ctr("containers", "delete", id); err != nil && !strings.Contains(o, "not found") {
			errs = append(errs, fmt.Errorf("ctr containers delete %s: %v: %s", id, err, o))
		}
	}
	return errors.Join(errs...)
}

// killShims ends the runc shims of this cluster's containerd still running: they outlive
// containerd and name its socket in their command line.
func killShims(sock string) error {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "containerd-shim-runc-v2") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == sock {
				pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

// unmountUnder unmounts every mount point under the given directories, deepest first
// (overlay root filesystems, the sandboxes' shm, the kubelet's volumes).
func unmountUnder(dirs ...string) error {
	var errs []error
	for try := 0; try < 3; try++ {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var points []string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			mp := device.UnescapeMountinfo(f[4])
			for _, d := range dirs {
				if mp == d || strings.HasPrefix(mp, d+"/") {
					points = append(points, mp)
				}
			}
		}
		if len(points) == 0 {
			return nil
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		errs = nil
		for _, p := range points {
			if err := syscall.Unmount(p, 0); err != nil && err != syscall.EINVAL {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
					errs = append(errs, fmt.Errorf("umount %s: %w", p, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// removeKubepods removes the kubelet's cgroups (kubepods and its QoS children, under
// every v1 controller and the unified hierarchy), deepest first, once they are empty.
func removeKubepods() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	if m, _ := filepath.Glob("/sys/fs/cgroup/kubepods*"); len(m) > 0 {
		roots = append(roots, m...)
	}
	var dirs []string
	for _, r := range roots {
		_ = filepath.Walk(r, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			errs = append(errs, fmt.Errorf("rmdir %s: %v (processes: %q)", d, err, strings.TrimSpace(string(procs))))
		}
	}
	return errors.Join(errs...)
}

// The kubelet's own iptables chains: the empty canaries it watches to notice a flush, and
// KUBE-FIREWALL (jumped to from INPUT and OUTPUT). Those that were there before bring-up
// (another kubelet's) are left alone.
var iptablesChains = [][3]string{
	{"iptables", "mangle", "KUBE-KUBELET-CANARY"}, {"iptables", "nat", "KUBE-KUBELET-CANARY"},
	{"iptables", "filter", "KUBE-KUBELET-CANARY"}, {"iptables", "mangle", "KUBE-IPTABLES-HINT"},
	{"iptables", "filter", "KUBE-FIREWALL"},
	{"ip6tables", "mangle", "KUBE-KUBELET-CANARY"}, {"ip6tables", "nat", "KUBE-KUBELET-CANARY"},
	{"ip6tables", "filter", "KUBE-KUBELET-CANARY"}, {"ip6tables", "mangle", "KUBE-IPTABLES-HINT"},
	{"ip6tables", "filter", "KUBE-FIREWALL"},
}

func chainExists(c [3]string) bool {
	return exec.Command(c[0], "-w", "-t", c[1], "-S", c[2]).Run() == nil
}

// recordHostState notes what the kubelet may add that existed before it ran.
func recordHostState(path string) error {
	var lines []string
	for _, c := range iptablesChains {
		if _, err := exec.LookPath(c[0]); err == nil && chainExists(c) {
			lines = append(lines, strings.Join(c[:], " "))
		}
	}
	// The device plugin socket's directory is fixed (/var/lib/kubelet/device-plugins),
	// whatever the kubelet's --root-dir.
	if _, err := os.Stat(kubeletFixedDir); err == nil {
		lines = append(lines, kubeletFixedDir)
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

const kubeletFixedDir = "/var/lib/kubelet"

// removeHostState removes the iptables chains and directory the kubelet made.
func removeHostState(path string) error {
	before := readLines(path)
	var errs []error
	for _, c := range iptablesChains {
		if before[strings.Join(c[:], " ")] {
			continue
		}
		if _, err := exec.LookPath(c[0]); err != nil || !chainExists(c) {
			continue
		}
		out, _ := exec.Command(c[0], "-w", "-t", c[1], "-S").Output()
		for _, rule := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(rule, "-A ") && strings.HasSuffix(rule, "-j "+c[2]) && !strings.Contains(rule, "\"") {
				args := append([]string{"-w", "-t", c[1], "-D"}, strings.Fields(rule)[1:]...)
				if o, err := exec.Command(c[0], args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %v: %s", c[0], strings.Join(args, " "), err, o))
				}
			}
		}
		_ = exec.Command(c[0], "-w", "-t", c[1], "-F", c[2]).Run()
		if o, err := exec.Command(c[0], "-w", "-t", c[1], "-X", c[2]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s -X %s: %v: %s", c[0], c[1], c[2], err, o))
		}
	}
	if !before[kubeletFixedDir] {
		_ = os.Remove(filepath.Join(kubeletFixedDir, "device-plugins", "kubelet.sock"))
		_ = os.Remove(filepath.Join(kubeletFixedDir, "device-plugins"))
		if err := os.Remove(kubeletFixedDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
