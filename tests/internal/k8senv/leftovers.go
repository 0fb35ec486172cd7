package k8senv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// host is what bring-up found on the host, under the lock (so no other test cluster's state
// is in it), for Leftovers.
type host struct {
	sysctls map[string]string
	absent  []string // directories the nodes' tools would create
}

var hostBefore host

// createdDirs are host directories a node's tools create when missing: ip netns, containerd's
// shims, and what a kubelet or the CNI plugins would write outside the node's disk.
var createdDirs = []string{"/run/netns", "/run/containerd", "/var/lib/kubelet", "/var/log/containers", "/var/lib/cni"}

func snapshotHost() host {
	h := host{sysctls: Sysctls()}
	for _, d := range createdDirs {
		if _, err := os.Lstat(d); os.IsNotExist(err) {
			h.absent = append(h.absent, d)
		}
	}
	return h
}

// Leftovers is what the last torn-down cluster left on the machine: its directories, the
// bridge, the nodes' network namespaces, disks, loop devices and cgroups, mounts, host
// directories that were not there at bring-up, and sysctls not put back.
func Leftovers() []string {
	var left []string
	for _, p := range []string{StateDir, RunDir, "/sys/class/net/" + Bridge} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	for i := 1; i <= MaxNodes; i++ {
		n := newNode(nil, i)
		if _, err := os.Lstat("/run/netns/" + n.netns); err == nil {
			left = append(left, "network namespace "+n.netns)
		}
		if _, err := os.Lstat(n.image); err == nil {
			left = append(left, n.image)
		}
		if out, _ := exec.Command("losetup", "-j", n.image, "-O", "NAME", "-n").Output(); len(strings.TrimSpace(string(out))) > 0 {
			left = append(left, "loop device "+strings.TrimSpace(string(out)))
		}
		if m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", n.CgroupRoot)); len(m) > 0 {
			left = append(left, m...)
		}
	}
	// Tests' disks (TestDisk).
	if m, _ := filepath.Glob("/dev/shm/diskprobe-k8s-test-*"); len(m) > 0 {
		left = append(left, m...)
	}
	left = append(left, mountsUnder(StateDir, RunDir)...)
	for _, d := range hostBefore.absent {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, d+" (not there at bring-up)")
		}
	}
	for k, v := range Sysctls() {
		if was, ok := hostBefore.sysctls[k]; ok && was != v {
			left = append(left, fmt.Sprintf("sysctl %s %s, was %s", k, v, was))
		}
	}
	return left
}
