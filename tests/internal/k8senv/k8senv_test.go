package k8senv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestMain runs the tests on a cluster of MaxNodes nodes, then checks that its teardown
// left nothing on the machine.
func TestMain(m *testing.M) {
	code := Main(m, MaxNodes)
	if BringUp > 0 {
		if left := Leftovers(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "k8senv: the teardown left:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// TestThreeNodesRunPodsOnDisksAndNetworksOfTheirOwn brings the cluster up and runs a pod of
// the pause image on each node, tainted and labelled like a kubeadm control plane: each pod
// gets an address of its node's share and answers from the host, and each node's /var/lib is
// its own disk, which neither the host nor the other nodes see.
func TestThreeNodesRunPodsOnDisksAndNetworksOfTheirOwn(t *testing.T) {
	testenv.RequireRoot(t)
	c := Get(t, framework.ToolDir(t, "k8s"))
	if len(c.Nodes) != MaxNodes {
		t.Fatalf("%d nodes, want %d", len(c.Nodes), MaxNodes)
	}
	for _, n := range c.Nodes {
		taints := c.Kubectl(t, "get", "node", n.Name, "-o", "jsonpath={.spec.taints[*].key}")
		if !strings.Contains(taints, "node-role.kubernetes.io/control-plane") {
			t.Errorf("node %s taints %q", n.Name, taints)
		}
		addr := c.Kubectl(t, "get", "node", n.Name, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
		if addr != n.IP {
			t.Errorf("node %s has the address %s, want %s", n.Name, addr, n.IP)
		}
		c.Kubectl(t, "run", "p-"+n.Name, "--image="+PauseImage, "--image-pull-policy=Never",
			`--overrides={"spec":{"nodeName":"`+n.Name+`","tolerations":[{"operator":"Exists"}]}}`)
	}
	for _, n := range c.Nodes {
		pod := "p-" + n.Name
		if out, err := c.KubectlErr("wait", "--for=condition=Ready", "pod/"+pod, "--timeout=120s"); err != nil {
			t.Fatalf("%v\n%s\n%s\n%s", err, out, c.Kubectl(t, "describe", "pod", pod), c.Logs(30))
		}
		ip := c.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
		_, share, _ := net.ParseCIDR(n.PodCIDR)
		if !share.Contains(net.ParseIP(ip)) {
			t.Errorf("pod on %s has the address %s, outside the node's %s", n.Name, ip, n.PodCIDR)
		}
		// The pause container listens on nothing: a refused connection is an answer from the pod.
		conn, err := net.DialTimeout("tcp", ip+":1", 5*time.Second)
		if err == nil {
			_ = conn.Close()
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the pod on %s at %s does not answer from the host: %v", n.Name, ip, err)
		}
	}

	// Each node's /var/lib is its disk: a file one node writes in its /var/lib/etcd is on no
	// other node and not on the host.
	mark := "diskprobe-k8s-test-" + fmt.Sprint(os.Getpid())
	first := c.Nodes[0]
	if err := os.WriteFile(first.Path("/var/lib/etcd/"+mark), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(first.Path("/var/lib/etcd/" + mark)) })
	for _, n := range c.Nodes[1:] {
		if _, err := os.Stat(n.Path("/var/lib/etcd/" + mark)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s sees %s's file: %v", n.Name, first.Name, err)
		}
	}
	if _, err := os.Stat("/var/lib/etcd/" + mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host sees %s's file: %v", first.Name, err)
	}
	for _, n := range c.Nodes {
		var disk, varlib syscall.Stat_t
		if err := syscall.Stat(n.Disk, &disk); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(n.Path("/var/lib/etcd"), &varlib); err != nil {
			t.Fatal(err)
		}
		if varlib.Dev != disk.Rdev {
			t.Errorf("%s's /var/lib/etcd is on device %d, not its disk %s (%d)", n.Name, varlib.Dev, n.Disk, disk.Rdev)
		}
		if mode := varlib.Mode & 0o777; mode != 0o700 {
			t.Errorf("%s's /var/lib/etcd has mode %o, want kubeadm's 0700", n.Name, mode)
		}
	}
	for _, n := range c.Nodes {
		c.Kubectl(t, "delete", "pod", "p-"+n.Name, "--wait=true")
	}
}
