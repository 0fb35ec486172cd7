package k8senv

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnforceNetworkPolicies runs kube-router's network policy controller (bin, built by
// scripts/tools.sh; its firewall alone: no routing, no service proxy) in every node's network
// namespace until t ends, as k3s embeds it: NetworkPolicies are then enforced with iptables and
// ipsets on each node, for traffic into its pods from other nodes and from the host, while
// traffic from the pod's own node (the kubelet's probes) is always let in. At the end it
// stops them and removes their chains and sets, so that no later test meets rules left for
// pods whose addresses are reused. (kube-router v2.1.0's own --cleanup-config leaves the
// chains and then panics in its service proxy's cleanup.)
func (c *Cluster) EnforceNetworkPolicies(t testing.TB, bin string) {
	t.Helper()
	for _, n := range c.Nodes {
		name := "kube-router-" + n.Name
		t.Cleanup(func() {
			if err := stopPid(c.path("pid", name), c.procs); err != nil {
				t.Errorf("stopping %s: %v", name, err)
			}
			if err := n.removeRouterRules(); err != nil {
				t.Errorf("%s: removing kube-router's rules: %v", n.Name, err)
			}
		})
		if err := c.run(name, "nsenter", "--net=/run/netns/"+n.netns, "--", bin,
			"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
			"--kubeconfig="+c.Kubeconfig, "--hostname-override="+n.Name,
			"--service-cluster-ip-range="+ServiceSubnet, "--health-port=0", "--metrics-port=0",
			"--iptables-sync-period=1m"); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(n.routerChains(), "KUBE-ROUTER-FORWARD") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: kube-router made no KUBE-ROUTER-FORWARD chain in 2m; its log:\n%s", n.Name, tail(c.path("log", "kube-router-"+n.Name+".log"), 30))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// routerChain reports whether an iptables chain is kube-router's network policy
// controller's: its own, its pods' and its policies'.
func routerChain(name string) bool {
	for _, p := range []string{"KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// removeRouterRules removes, in the node's network namespace, the jumps to kube-router's
// chains, the chains, and every ipset (kube-router is the only user of ipsets there).
func (n *Node) removeRouterRules() error {
	ipt := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.netns, "iptables", "-w"}, args...)...).CombinedOutput()
		return string(out), err
	}
	rules, err := ipt("-S")
	if err != nil {
		return fmt.Errorf("iptables -S: %v: %s", err, rules)
	}
	var chains []string
	var errs []string
	for _, l := range strings.Split(rules, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "-N" && routerChain(f[1]):
			chains = append(chains, f[1])
		case len(f) > 3 && f[0] == "-A" && !routerChain(f[1]) && routerChain(f[len(f)-1]):
			// iptables -S quotes a rule's comment as a shell would: a shell reads it back.
			del := "iptables -w -D " + strings.TrimPrefix(l, "-A ")
			if out, err := exec.Command("ip", "netns", "exec", n.netns, "sh", "-c", del).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v: %s", del, err, out))
			}
		}
	}
	for _, op := range []string{"-F", "-X"} {
		for _, ch := range chains {
			if out, err := ipt(op, ch); err != nil {
				errs = append(errs, fmt.Sprintf("iptables %s %s: %v: %s", op, ch, err, out))
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", n.netns, "ipset", "destroy").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("ipset destroy: %v: %s", err, out))
	}
	if left := n.routerChains(); left != "" {
		errs = append(errs, "chains left: "+left)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// routerChains lists kube-router's iptables chains (its own, its pods' and its policies') in the node's network namespace.
func (n *Node) routerChains() string {
	out, _ := exec.Command("ip", "netns", "exec", n.netns, "iptables", "-w", "-S").Output()
	var chains []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "-N" && routerChain(f[1]) {
			chains = append(chains, f[1])
		}
	}
	return strings.Join(chains, " ")
}

// String names the node, for messages.
func (n *Node) String() string { return fmt.Sprintf("%s (%s)", n.Name, n.IP) }
