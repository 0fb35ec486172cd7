package k8senv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Node is one of the cluster's nodes: a kubelet and a containerd in a network namespace and a
// mount namespace of the node's own. In its mount namespace, /var/lib is a disk of its own
// (Disk: a loop device over a file in /dev/shm, ext4), holding the kubelet's root, containerd's
// images and an empty /var/lib/etcd like kubeadm's (mode 0700); /var/log and /run/netns are
// its own too. The rest of the host's filesystem is shared, as on a node (mounts made on the
// host after bring-up reach a node only under SharedDir).
type Node struct {
	Name       string // the node's name, also its hostname label
	IP         string // on NodeSubnet, in the node's network namespace
	PodCIDR    string
	Disk       string // the loop device mounted at the node's /var/lib
	Containerd string // containerd's socket
	// CgroupRoot is the kubelet's cgroupRoot: every pod's cgroups are under it, in each
	// hierarchy.
	CgroupRoot string

	c     *Cluster
	index int
	dir   string // RunDir/<Name>: the node's own files on the host
	netns string // its network namespace (ip netns)
	mntns string // the file its mount namespace is pinned to
	image string // Disk's backing file
}

// nodeDiskSize is each node's /var/lib: room for the chart's etcd preset (a 1 GiB free-space
// floor, 320 MiB of probe files), the images and the kubelet. Sparse, in RAM: only what is
// written takes memory, and no node's fdatasync waits on this machine's own disk.
const nodeDiskSize = 3 << 30

func newNode(c *Cluster, i int) *Node {
	name := fmt.Sprintf("dpk8s-%d", i)
	return &Node{
		Name:       name,
		IP:         nodeIP(i),
		PodCIDR:    podCIDR(i),
		CgroupRoot: "/" + name,
		c:          c,
		index:      i,
		dir:        filepath.Join(RunDir, name),
		netns:      name,
		mntns:      filepath.Join(RunDir, name, "mnt"),
		image:      filepath.Join("/dev/shm", "diskprobe-k8s-"+name+".img"),
	}
}

func nodeIP(i int) string  { return fmt.Sprintf("10.244.212.%d", 10+i) }
func podCIDR(i int) string { return fmt.Sprintf("10.244.213.%d/26", 64*i) }

// podGateway is the address of node i's CNI bridge, the first of its pod range.
func podGateway(i int) string { return fmt.Sprintf("10.244.213.%d", 64*i+1) }

// record notes a thing bring-up made, for a teardown after a killed run: "<kind> <value>".
func (c *Cluster) record(kind, value string) error {
	f, err := os.OpenFile(c.path("made"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = fmt.Fprintf(f, "%s %s\n", kind, value)
	return err
}

// prepare makes the node's network namespace, disk, mount namespace, cgroup root and files.
func (n *Node) prepare(p *pki) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	if err := n.c.record("node", n.Name); err != nil {
		return err
	}
	if err := n.network(); err != nil {
		return fmt.Errorf("node %s: network: %w", n.Name, err)
	}
	if err := n.disk(); err != nil {
		return fmt.Errorf("node %s: disk: %w", n.Name, err)
	}
	if err := n.cgroupRoot(); err != nil {
		return fmt.Errorf("node %s: cgroups: %w", n.Name, err)
	}
	return n.files(p)
}

// network makes the node's namespace, joined to Bridge by a veth pair (eth0 inside), with
// routes to the other nodes' pods through them and to everything else through the host.
func (n *Node) network() error {
	if err := n.c.record("netns", n.netns); err != nil {
		return err
	}
	hostEnd := "dpk8s" + strconv.Itoa(n.index) + "h"
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"link", "set", hostEnd, "master", Bridge, "up"},
		{"-n", n.netns, "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "route", "add", "default", "via", HostIP},
		{"route", "add", n.PodCIDR, "via", n.IP},
	}
	for i := 1; i <= MaxNodes; i++ {
		if i != n.index {
			steps = append(steps, []string{"-n", n.netns, "route", "add", podCIDR(i), "via", nodeIP(i)})
		}
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	// The node forwards between its pods' bridge and eth0 (the bridge plugin sets it too).
	out, err := exec.Command("ip", "netns", "exec", n.netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip_forward in %s: %v: %s", n.netns, err, out)
	}
	return nil
}

// disk makes the node's /var/lib: a loop device over a sparse file in /dev/shm, ext4, mounted
// in a mount namespace of the node's own, pinned to n.mntns. The loop device is set to detach
// itself (autoclear) once that namespace, its only user, is gone.
func (n *Node) disk() error {
	if err := n.c.record("image", n.image); err != nil {
		return err
	}
	f, err := os.OpenFile(n.image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(nodeDiskSize); err != nil {
		_ = f.Close()
		return err
	}
	_ = f.Close()
	out, err := exec.Command("losetup", "--find", "--show", n.image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("losetup %s: %v: %s", n.image, err, out)
	}
	n.Disk = strings.TrimSpace(string(out))
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", n.Disk).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", n.Disk, err, out)
	}
	if err := os.WriteFile(n.mntns, nil, 0o600); err != nil {
		return err
	}
	if err := n.c.record("mntns", n.mntns); err != nil {
		return err
	}
	if out, err := exec.Command("unshare", "--mount="+n.mntns, "--propagation", "slave", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("unshare --mount=%s: %v: %s", n.mntns, err, out)
	}
	script := strings.Join([]string{
		"set -e",
		// discard: what the node deletes is punched out of the file in /dev/shm, and its
		// memory given back.
		"mount -t ext4 -o discard " + n.Disk + " /var/lib",
		"mkdir -m 0700 /var/lib/etcd",
		"mount -t tmpfs -o mode=0755,size=256m diskprobe-k8s-log /var/log",
		"mount -t tmpfs -o mode=0755,size=1m diskprobe-k8s-netns /run/netns",
	}, "\n")
	if out, err := n.Exec("sh", "-c", script); err != nil {
		return fmt.Errorf("the node's mounts: %v: %s", err, out)
	}
	if out, err := exec.Command("losetup", "-d", n.Disk).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup -d %s (autoclear): %v: %s", n.Disk, err, out)
	}
	return nil
}

// cgroupRoot makes the kubelet's cgroupRoot in every hierarchy (the kubelet wants it to
// exist); a cpuset cgroup starts with no CPUs and no memory nodes, so it gets the root's.
func (n *Node) cgroupRoot() error {
	if err := n.c.record("cgroup", n.CgroupRoot); err != nil {
		return err
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue // cpu and cpuacct are symlinks to cpu,cpuacct
		}
		d := filepath.Join(h, n.CgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// files writes the node's certificates, kubeconfig, containerd, CNI and kubelet
// configurations into its own directory (which its mount namespace sees: RunDir is not
// under /var/lib).
func (n *Node) files(p *pki) error {
	pkiDir := filepath.Join(n.dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"ca.crt", "kubelet-" + n.Name + ".crt", "kubelet-" + n.Name + ".key", "kubelet-serving-" + n.Name + ".crt", "kubelet-serving-" + n.Name + ".key"} {
		data, err := os.ReadFile(p.file(f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pkiDir, f), data, 0o600); err != nil {
			return err
		}
	}
	kubeconfig := filepath.Join(n.dir, "kubelet.kubeconfig")
	// The kubeconfig names this node's copies: the host's PKI is under /var/lib, which the
	// node's disk hides.
	if err := writeKubeconfig(kubeconfig, n.c.Server, "kubelet", filepath.Join(pkiDir, "ca.crt"),
		filepath.Join(pkiDir, "kubelet-"+n.Name+".crt"), filepath.Join(pkiDir, "kubelet-"+n.Name+".key")); err != nil {
		return err
	}
	n.Containerd = filepath.Join(n.dir, "containerd.sock")
	cni := filepath.Join(n.dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	// restrict_oom_score_adj: root in these VMs lacks CAP_SYS_RESOURCE, and a sandbox
	// asking for oom_score_adj -998 makes runc fail ("can't get final child's PID from pipe").
	// runc's state (Root) under the node's directory: runc's default, /run/containerd/runc,
	// would be shared by the nodes.
	conf := fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, filepath.Join(n.dir, "containerd-state"), n.Containerd, n.Containerd+".ttrpc",
		filepath.Join(n.dir, "containerd-opt"), PauseImage, cni, filepath.Join(n.dir, "runc"))
	if err := os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	// No masquerading (no iptables rules): pods reach the host and each other, not beyond.
	netconf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "diskprobe-k8s",
  "plugins": [
    {"type": "bridge", "bridge": "cbr0", "isGateway": true, "ipMasq": false, "hairpinMode": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`, n.PodCIDR, podGateway(n.index))
	if err := os.WriteFile(filepath.Join(cni, "10-diskprobe-k8s.conflist"), []byte(netconf), 0o644); err != nil {
		return err
	}
	// cgroupfs and failCgroupV1 false: these kernels run hybrid cgroup v1. Image garbage
	// collection off: nothing imported can be pulled again.
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
tlsCertFile: %q
tlsPrivateKeyFile: %q
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
registerWithTaints:
  - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
evictionHard: {memory.available: 1Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
`, n.IP, filepath.Join(pkiDir, "ca.crt"), filepath.Join(pkiDir, "kubelet-serving-"+n.Name+".crt"),
		filepath.Join(pkiDir, "kubelet-serving-"+n.Name+".key"), n.CgroupRoot, n.Containerd)
	return os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), []byte(kubelet), 0o644)
}

// inNode is the command line that runs args in the node's namespaces.
func (n *Node) inNode(args ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.netns, "--mount=" + n.mntns, "--"}, args...)
}

// Exec runs a command in the node's network and mount namespaces (a mount on its disk, an
// address in its network) and returns its combined output.
func (n *Node) Exec(args ...string) (string, error) {
	cmd := n.inNode(args...)
	out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Path is path as the node sees it, from the host: through the root of a process in the
// node's mount namespace (its containerd).
func (n *Node) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", pidOf(n.c.path("pid", "containerd-"+n.Name))), path)
}

func (n *Node) startContainerd() error {
	cmd := n.inNode("containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	if err := n.c.run("containerd-"+n.Name, cmd[0], cmd[1:]...); err != nil {
		return err
	}
	return n.c.waitFor("containerd of "+n.Name, time.Minute, func() bool {
		return exec.Command("ctr", "--address", n.Containerd, "version").Run() == nil
	})
}

func (n *Node) startKubelet() error {
	cmd := n.inNode(n.c.bin("kubelet"), "--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"), "--hostname-override="+n.Name,
		"--node-ip="+n.IP, "--cert-dir="+filepath.Join(n.dir, "kubelet-pki"))
	return n.c.run("kubelet-"+n.Name, cmd[0], cmd[1:]...)
}

// Ctr runs containerd's ctr against the node's containerd, in the CRI's k8s.io namespace.
func (n *Node) Ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", n.Containerd, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
