// Package k8senv brings up a Kubernetes cluster of one or more nodes on this machine for a
// test binary and tears it down after it: etcd (Debian's etcd-server), kube-apiserver,
// kube-controller-manager and kube-scheduler on the host, and per node a kubelet on a
// containerd of its own (Debian's, with runc and the CNI bridge plugin), both in network and
// mount namespaces of the node's own, whose /var/lib is a disk of its own (a loop device). The
// Kubernetes binaries are the pinned ones scripts/tools.sh builds into its per-machine cache.
//
// A test package calls Main from TestMain and Get from each test: the first Get brings the
// cluster up (a root-only, long test: -short and non-root skip it), Main tears it down
// after the last test, on SIGINT/SIGTERM too. Everything it makes is recorded under
// StateDir while it runs, so a binary killed outright (a panic, the test timeout) is
// cleaned up by the next bring-up on the machine, which runs the same teardown first.
// One cluster per machine: bring-up takes an exclusive lock held until teardown.
package k8senv

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// StateDir holds the control plane's files (PKI, kubeconfigs, etcd's data), the daemons'
	// logs and pid files, and the record of what bring-up made, for teardown.
	StateDir = "/var/lib/diskprobe-k8s"
	// RunDir holds each node's own files (RunDir/<node>: containerd's root and state, the
	// kubelet's configuration and certificates, the CNI configuration), the pinned mount
	// namespaces, and SharedDir. It is not under /var/lib, which each node replaces with its disk.
	RunDir   = "/run/diskprobe-k8s"
	lockFile = "/run/lock/diskprobe-k8s.lock"

	// Bridge joins the nodes' network namespaces to the host.
	Bridge = "dpk8s0"
	// NodeSubnet is the nodes' network on Bridge: node i (from 1) is 10.244.212.(10+i).
	NodeSubnet = "10.244.212.0/24"
	// HostIP is the host's address on Bridge, where the API server listens.
	HostIP = "10.244.212.1"
	// PodSubnet is the pods' addresses: node i (from 1) has 10.244.213.(64*i)/26 on a CNI
	// bridge in its own network namespace (host-local IPAM). The host and every node route
	// each node's share to it.
	PodSubnet = "10.244.213.0/24"
	// ServiceSubnet is where ClusterIPs come from; they are not routed (no kube-proxy).
	ServiceSubnet = "10.96.213.0/24"

	// PauseImage is the sandbox image, built from ./pause.
	PauseImage = "localhost/diskprobe-k8s-pause:1"

	// Version is the Kubernetes release the cluster runs (scripts/tools.sh pins it).
	Version = "v1.34.1"

	// MaxNodes is how many nodes a cluster can have: the pod subnet holds three /26 shares
	// (the first is left out).
	MaxNodes = 3
)

// SharedDir is a directory whose mounts every node sees, also those made after bring-up
// (a FUSE mount of a test): the nodes' mount namespaces are slaves of it. Other host mounts
// made after bring-up stay the host's.
var SharedDir = filepath.Join(RunDir, "shared")

// sysctls the kubelet (and the bridge plugin, ip_forward) set: saved at bring-up, restored
// at teardown.
var sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// Cluster is a running test cluster.
type Cluster struct {
	BinDir     string // kube-apiserver, kubelet, kubectl, ...
	Kubeconfig string // the admin's (system:masters)
	Server     string // https://HostIP:PORT
	CAFile     string
	// CertFile and KeyFile are the admin's client certificate, for programs that take no
	// kubeconfig (prometheus-operator, a Prometheus outside the cluster).
	CertFile, KeyFile string
	Nodes             []*Node

	lock  *os.File
	procs []*daemon
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

var (
	mu         sync.Mutex
	cluster    *Cluster
	upErr      error
	upDone     bool
	teardownMu sync.Mutex
	nodeCount  = 1
)

// BringUp is how long the cluster took to come up, for the tests' reports.
var BringUp time.Duration

// TeardownTime is how long its teardown took.
var TeardownTime time.Duration

// Main runs the tests of a package whose cluster has nodes nodes (1 to MaxNodes) and tears
// it down if one was brought up; its result is the exit code. SIGINT and SIGTERM tear it
// down too.
func Main(m *testing.M, nodes int) int {
	if nodes < 1 || nodes > MaxNodes {
		fmt.Fprintf(os.Stderr, "k8senv: %d nodes: 1 to %d\n", nodes, MaxNodes)
		return 2
	}
	nodeCount = nodes
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "k8senv: %v: tearing the test cluster down\n", s)
		runHostCleanups()
		shutdown()
		os.Exit(130)
	}()
	defer shutdown()
	return m.Run()
}

// Cleanup registers f as a cleanup of t and also runs it if the binary is interrupted
// (SIGINT, SIGTERM) before t's cleanups ran: for what a test changes on the host (a
// directory put back, a mount), which an interrupt must not leave behind either.
func Cleanup(t testing.TB, f func()) {
	var once sync.Once
	run := func() { once.Do(f) }
	hostMu.Lock()
	id := len(hostCleanups)
	hostCleanups = append(hostCleanups, run)
	hostMu.Unlock()
	t.Cleanup(func() {
		run()
		hostMu.Lock()
		hostCleanups[id] = nil
		hostMu.Unlock()
	})
}

var (
	hostMu       sync.Mutex
	hostCleanups []func()
)

// runHostCleanups runs the registered cleanups not yet run, last first.
func runHostCleanups() {
	hostMu.Lock()
	fs := append([]func(){}, hostCleanups...)
	hostMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i] != nil {
			fs[i]()
		}
	}
}

func shutdown() {
	mu.Lock()
	c := cluster
	mu.Unlock()
	if c == nil {
		return
	}
	start := time.Now()
	if err := c.teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "k8senv: teardown: %v\n", err)
	}
	TeardownTime = time.Since(start)
	fmt.Fprintf(os.Stderr, "k8senv: cluster torn down in %v\n", TeardownTime.Round(100*time.Millisecond))
}

// Get returns the package's cluster, bringing it up on the first call. It skips the test
// under -short, when not root, or when the Kubernetes binaries are not built (`make tools`;
// a failure instead when DISKPROBE_TOOLS_REQUIRED=1); a bring-up that failed fails every
// test that asks.
func Get(t testing.TB, binDir string) *Cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !upDone {
		upDone = true
		start := time.Now()
		cluster, upErr = up(binDir, nodeCount)
		BringUp = time.Since(start)
		if upErr == nil {
			t.Logf("k8senv: Kubernetes %s with %d node(s) up in %v", Version, nodeCount, BringUp.Round(100*time.Millisecond))
		}
	}
	if upErr != nil {
		t.Fatalf("bringing up the test cluster: %v", upErr)
	}
	return cluster
}

func up(binDir string, nodes int) (c *Cluster, err error) {
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "k8senv: another test cluster holds %s; waiting for it\n", lockFile)
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			_ = lock.Close()
			return nil, err
		}
	}
	c = &Cluster{BinDir: binDir, lock: lock}
	// What a killed run left behind (recorded under StateDir) goes first.
	if _, err := os.Stat(StateDir); err == nil {
		fmt.Fprintf(os.Stderr, "k8senv: %s exists: tearing down what an earlier run left\n", StateDir)
		if err := c.cleanState(); err != nil {
			_ = lock.Close()
			return nil, fmt.Errorf("cleaning up an earlier run: %w", err)
		}
	}
	defer func() {
		if err != nil {
			c.logTails()
			if terr := c.teardown(); terr != nil {
				err = fmt.Errorf("%w (and tearing down: %v)", err, terr)
			}
			c = nil
		}
	}()
	if err := c.start(nodes); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{StateDir}, p...)...) }

func (c *Cluster) start(nodes int) error {
	for _, d := range []string{StateDir, RunDir, c.path("log"), c.path("pid")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := saveSysctls(c.path("sysctls")); err != nil {
		return err
	}
	hostBefore = snapshotHost()
	if err := recordNetns(c.path("netns-before")); err != nil {
		return err
	}
	if err := recordHostState(c.path("host-before")); err != nil {
		return err
	}
	// Host directories the nodes' tools create when missing (ip netns; containerd's shims'
	// sockets): removed at teardown if they did not exist before and are left empty.
	for _, d := range []string{"/run/netns", "/run/containerd"} {
		if _, err := os.Lstat(d); os.IsNotExist(err) {
			if err := c.record("dir", d); err != nil {
				return err
			}
		}
	}
	if err := c.hostNetwork(); err != nil {
		return err
	}
	if err := prepareMounts(); err != nil {
		return err
	}
	for i := 1; i <= nodes; i++ {
		c.Nodes = append(c.Nodes, newNode(c, i))
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, cmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	c.Server = fmt.Sprintf("https://%s:%d", HostIP, apiPort)

	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	svcIP := "10.96.213.1"
	issues := []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{HostIP, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", svcIP}},
		{"admin", "kubernetes-admin", []string{"system:masters"}, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"sa", "service-accounts", nil, nil},
	}
	for _, n := range c.Nodes {
		issues = append(issues,
			struct {
				name, cn string
				orgs     []string
				hosts    []string
			}{"kubelet-" + n.Name, "system:node:" + n.Name, []string{"system:nodes"}, nil},
			struct {
				name, cn string
				orgs     []string
				hosts    []string
			}{"kubelet-serving-" + n.Name, n.Name, nil, []string{n.Name, n.IP}})
	}
	for _, is := range issues {
		if err := p.issue(is.name, is.cn, is.orgs, is.hosts...); err != nil {
			return err
		}
	}
	c.CAFile, c.CertFile, c.KeyFile = p.file("ca.crt"), p.file("admin.crt"), p.file("admin.key")
	c.Kubeconfig = c.path("admin.kubeconfig")
	for _, n := range []string{"admin", "controller-manager", "scheduler"} {
		if err := p.kubeconfig(c.path(n+".kubeconfig"), c.Server, n, p.file(n+".crt"), p.file(n+".key")); err != nil {
			return err
		}
	}

	// etcd
	if err := os.MkdirAll(c.path("etcd"), 0o700); err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.run("etcd", "etcd", "--name=k8s", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=k8s="+peerURL, "--initial-cluster-state=new"); err != nil {
		return err
	}
	// The nodes' disks and namespaces are made while etcd and the API server start.
	nodesReady := make(chan error, 1)
	go func() {
		var errs []error
		for _, n := range c.Nodes {
			errs = append(errs, n.prepare(p))
		}
		nodesReady <- errors.Join(errs...)
	}()
	if err := c.waitHTTP("etcd", etcdURL+"/health", false, time.Minute); err != nil {
		<-nodesReady
		return err
	}

	// kube-apiserver, on the nodes' bridge: the kubelets reach it from their namespaces.
	if err := c.run("kube-apiserver", c.bin("kube-apiserver"),
		"--etcd-servers="+etcdURL, "--bind-address="+HostIP, "--advertise-address="+HostIP,
		fmt.Sprintf("--secure-port=%d", apiPort), "--cert-dir="+c.path("apiserver-certs"),
		"--endpoint-reconciler-type=none", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-cluster-ip-range="+ServiceSubnet,
		"--client-ca-file="+p.file("ca.crt"),
		"--tls-cert-file="+p.file("apiserver.crt"), "--tls-private-key-file="+p.file("apiserver.key"),
		"--kubelet-client-certificate="+p.file("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p.file("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+p.file("ca.crt"),
		"--service-account-key-file="+p.file("sa.key"), "--service-account-signing-key-file="+p.file("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc"); err != nil {
		<-nodesReady
		return err
	}
	if err := <-nodesReady; err != nil {
		return err
	}
	if err := c.waitHTTP("kube-apiserver", c.Server+"/readyz", true, 2*time.Minute); err != nil {
		return err
	}
	if err := c.run("kube-controller-manager", c.bin("kube-controller-manager"),
		"--kubeconfig="+c.path("controller-manager.kubeconfig"), "--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cmPort), "--cert-dir="+c.path("cm-certs"),
		"--service-account-private-key-file="+p.file("sa.key"), "--root-ca-file="+p.file("ca.crt"),
		"--use-service-account-credentials=true", "--service-cluster-ip-range="+ServiceSubnet); err != nil {
		return err
	}
	if err := c.run("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+c.path("scheduler.kubeconfig"), "--leader-elect=false",
		"--authentication-kubeconfig="+c.path("scheduler.kubeconfig"), "--authorization-kubeconfig="+c.path("scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedPort), "--cert-dir="+c.path("sched-certs")); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := n.startContainerd(); err != nil {
			return err
		}
	}
	if err := c.importPause(); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := n.startKubelet(); err != nil {
			return err
		}
	}
	// Like kubeadm's control-plane nodes: the label (a kubelet may not set node-role labels
	// on itself) and the taint (registered by the kubelet).
	for _, n := range c.Nodes {
		if err := c.waitFor("node "+n.Name+" Ready", 2*time.Minute, func() bool {
			out, err := c.kubectl("get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return err == nil && out == "True"
		}); err != nil {
			return err
		}
		if out, err := c.kubectl("label", "node", n.Name, "node-role.kubernetes.io/control-plane="); err != nil {
			return fmt.Errorf("labelling node %s: %v\n%s", n.Name, err, out)
		}
	}
	// Pods need their namespace's default ServiceAccount, made by the controller-manager.
	return c.waitFor("the default ServiceAccount", time.Minute, func() bool {
		_, err := c.kubectl("get", "serviceaccount", "default", "-n", "default")
		return err == nil
	})
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.BinDir, name) }

// hostNetwork makes the bridge the nodes hang on, the host's address on it, and lets the
// host forward between them (the kubelet would set ip_forward too; restored at teardown).
func (c *Cluster) hostNetwork() error {
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", HostIP + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// prepareMounts makes RunDir a private mount (the nodes' mount namespaces are pinned to files
// in it, which a shared mount refuses) and SharedDir a shared one inside it.
func prepareMounts() error {
	for _, d := range []string{RunDir, SharedDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount(RunDir, RunDir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", RunDir, err)
	}
	if err := syscall.Mount("", RunDir, "", syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making %s private: %w", RunDir, err)
	}
	if err := syscall.Mount(SharedDir, SharedDir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", SharedDir, err)
	}
	if err := syscall.Mount("", SharedDir, "", syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making %s shared: %w", SharedDir, err)
	}
	return nil
}

// spawn runs every daemon's fork from one goroutine locked to its own thread, which lives
// as long as the process: Pdeathsig (sent when the forking thread dies) then kills the
// daemons if the test binary dies without running its teardown.
var spawn = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for f := range spawn {
			f()
		}
	}()
}

func (c *Cluster) run(name, bin string, args ...string) error {
	logPath := c.path("log", name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error)
	spawn <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(d.done) }()
	c.procs = append(c.procs, d)
	return os.WriteFile(c.path("pid", name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

func (c *Cluster) waitHTTP(name, url string, useTLS bool, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	if useTLS {
		cfg, err := c.TLSConfig()
		if err != nil {
			return err
		}
		client.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return c.waitFor(name+" healthy", timeout, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TLSConfig is a client configuration for the apiserver as the cluster's admin.
func (c *Cluster) TLSConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// waitFor polls cond until it holds, failing early when a daemon has exited.
func (c *Cluster) waitFor(what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		for _, d := range c.procs {
			select {
			case <-d.done:
				return fmt.Errorf("waiting for %s: %s exited (%v); its log: %s", what, d.name, d.cmd.ProcessState, d.log)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (c *Cluster) kubectl(args ...string) (string, error) {
	out, err := exec.Command(c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Kubectl runs kubectl as the cluster's admin and returns its output; an error fails t.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// KubectlErr runs kubectl and returns its output and error.
func (c *Cluster) KubectlErr(args ...string) (string, error) { return c.kubectl(args...) }

// Logs is the tail of each daemon's log, for a failing test's report.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, d := range c.procs {
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", d.name, d.log, lines, tail(d.log, lines))
	}
	return b.String()
}

func (c *Cluster) logTails() {
	for _, d := range c.procs {
		select {
		case <-d.done:
			fmt.Fprintf(os.Stderr, "k8senv: %s exited (%v); last lines of its log:\n%s\n", d.name, d.cmd.ProcessState, tail(d.log, 30))
		default:
		}
	}
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ip runs ip(8) with args.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func saveSysctls(path string) error {
	var b strings.Builder
	for _, s := range sysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			continue // not on this kernel
		}
		fmt.Fprintf(&b, "%s %s\n", s, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func restoreSysctls(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		p := filepath.Join("/proc/sys", k)
		if cur, _ := os.ReadFile(p); strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sysctls reads the values the cluster saves and restores, for a test that checks teardown.
func Sysctls() map[string]string {
	m := map[string]string{}
	for _, s := range sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			m[s] = strings.TrimSpace(string(v))
		}
	}
	return m
}

func cniNetns() []string {
	m, _ := filepath.Glob("/run/netns/cni-*")
	sort.Strings(m)
	return m
}

func recordNetns(path string) error {
	return os.WriteFile(path, []byte(strings.Join(cniNetns(), "\n")), 0o644)
}

func readLines(path string) map[string]bool {
	m := map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if l := strings.TrimSpace(s.Text()); l != "" {
			m[l] = true
		}
	}
	return m
}
