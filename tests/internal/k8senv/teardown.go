package k8senv

import (
	"errors"
	"fmt"
	"io/fs"
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

// made is what bring-up recorded it made, by kind, in order.
func (c *Cluster) made() map[string][]string {
	m := map[string][]string{}
	data, _ := os.ReadFile(c.path("made"))
	for _, line := range strings.Split(string(data), "\n") {
		if kind, value, ok := strings.Cut(line, " "); ok {
			m[kind] = append(m[kind], value)
		}
	}
	return m
}

// cleanState tears down what StateDir records, whether this process or a killed one made
// it: each node's kubelet first (so it restarts nothing), then its containers and its
// containerd, then the control plane and etcd (each by the pid it was started with), then
// the mounts (the nodes' mount namespaces with them), the nodes' disks, network namespaces
// and cgroups, the bridge and the sysctls.
func (c *Cluster) cleanState() error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	made := c.made()
	// A killed run of the single-node layout (before nodes had namespaces), told by its pid
	// files: its kubelet and containerd, and its kubepods cgroups (emptied by then).
	var oldLayout bool
	if _, err := os.Stat(c.path("pid", "kubelet")); err == nil {
		oldLayout = true
		note(stopPid(c.path("pid", "kubelet"), c.procs))
		if alive(c.path("pid", "containerd")) {
			note(removeContainers(filepath.Join(RunDir, "containerd.sock")))
		}
		note(stopPid(c.path("pid", "containerd"), c.procs))
		note(killShims(filepath.Join(RunDir, "containerd.sock")))
	}
	for _, name := range made["node"] {
		note(stopPid(c.path("pid", "kube-router-"+name), c.procs))
		note(stopPid(c.path("pid", "kubelet-"+name), c.procs))
		sock := filepath.Join(RunDir, name, "containerd.sock")
		if alive(c.path("pid", "containerd-"+name)) {
			note(removeContainers(sock))
		}
		note(stopPid(c.path("pid", "containerd-"+name), c.procs))
		note(killShims(sock))
	}
	// What is left in the nodes' cgroups: containers whose containerd and shims a killed run
	// lost (the kernel reparents them), which would keep a node's mount namespace, and so its
	// disk, alive.
	for _, root := range made["cgroup"] {
		note(killCgroupProcs(root))
	}
	for _, n := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		note(stopPid(c.path("pid", n), c.procs))
	}
	// Unmounting the pinned mount namespaces ends them (no process is left in them), and with
	// them each node's disk, whose loop device detaches itself (autoclear).
	note(unmountUnder(StateDir, RunDir))
	for _, ns := range made["netns"] {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			note(ip("netns", "delete", ns))
		}
	}
	for _, img := range made["image"] {
		note(detachLoops(img))
		if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
			note(err)
		}
	}
	before := readLines(c.path("netns-before"))
	for _, ns := range cniNetns() {
		if before[ns] {
			continue
		}
		_ = syscall.Unmount(ns, syscall.MNT_DETACH)
		note(os.Remove(ns))
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		note(ip("link", "delete", Bridge))
	}
	for _, d := range made["dir"] {
		note(removeIfEmpty(d))
	}
	for _, root := range made["cgroup"] {
		note(removeCgroups(root))
	}
	if oldLayout {
		note(removeCgroups("kubepods"))
	}
	note(removeHostState(c.path("host-before")))
	note(restoreSysctls(c.path("sysctls")))
	if len(errs) == 0 {
		// Nothing may be mounted under what is removed: RemoveAll would go into it.
		if mounted := mountsUnder(StateDir, RunDir); len(mounted) > 0 {
			note(fmt.Errorf("still mounted, not removing %s and %s: %v", StateDir, RunDir, mounted))
		} else {
			note(os.RemoveAll(StateDir))
			note(os.RemoveAll(RunDir))
		}
	}
	return errors.Join(errs...)
}

// removeIfEmpty removes dir and the directories under it if nothing else is in them,
// unmounting dir first if it is a mount point of its own (ip netns makes /run/netns one).
func removeIfEmpty(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if d == dir {
			if len(mountsUnder(dir)) > 0 {
				if entries, _ := os.ReadDir(dir); len(entries) > 0 {
					return nil // another user's namespaces
				}
				if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
					return fmt.Errorf("umount %s: %w", dir, err)
				}
			}
		}
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return nil
}

// detachLoops detaches the loop devices over image, waiting for those a mount namespace in
// its last moments still holds (autoclear detaches them when it lets go).
func detachLoops(image string) error {
	var devs []string
	for i := 0; i < 50; i++ {
		out, _ := exec.Command("losetup", "-j", image, "-O", "NAME", "-n").Output()
		devs = strings.Fields(string(out))
		if len(devs) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, d := range devs {
		if out, err := exec.Command("losetup", "-d", d).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup -d %s (over %s): %v: %s", d, image, err, out))
		}
	}
	if out, _ := exec.Command("losetup", "-j", image, "-O", "NAME", "-n").Output(); len(strings.TrimSpace(string(out))) > 0 {
		errs = append(errs, fmt.Errorf("%s is still attached to %s", image, strings.TrimSpace(string(out))))
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

// mountsUnder lists the mount points at or under the given directories, deepest first.
func mountsUnder(dirs ...string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
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
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

// unmountUnder unmounts every mount point under the given directories, deepest first (the
// nodes' pinned mount namespaces, the shared directory and what tests mounted in it, the
// directories' own bind mounts).
func unmountUnder(dirs ...string) error {
	var errs []error
	for try := 0; try < 5; try++ {
		points := mountsUnder(dirs...)
		if len(points) == 0 {
			return nil
		}
		errs = nil
		for _, p := range points {
			if err := syscall.Unmount(p, 0); err != nil && err != syscall.EINVAL {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
					errs = append(errs, fmt.Errorf("umount %s: %w", p, err))
				}
			}
		}
	}
	if points := mountsUnder(dirs...); len(points) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v", points))
	}
	return errors.Join(errs...)
}

// killCgroupProcs kills every process in a node's cgroup root and below (in the pids
// hierarchy, which every process is in) and waits for them to go.
func killCgroupProcs(root string) error {
	base := filepath.Join("/sys/fs/cgroup/pids", root)
	procs := func() []int {
		var pids []int
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		return pids
	}
	for i := 0; i < 50; i++ {
		pids := procs()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("processes left in %s: %v", base, procs())
}

// removeCgroups removes a node's cgroup root (the kubelet's cgroupRoot, kubepods and its QoS
// and pod children under it) in every hierarchy, deepest first, once they are empty.
func removeCgroups(root string) error {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
	var dirs []string
	for _, r := range roots {
		if fi, err := os.Lstat(filepath.Dir(r)); err != nil || !fi.IsDir() {
			continue // cpu and cpuacct are symlinks to cpu,cpuacct
		}
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
