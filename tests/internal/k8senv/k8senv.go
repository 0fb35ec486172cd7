// Package k8senv brings up a single-node Kubernetes cluster on this machine for a test
// binary and tears it down after it: etcd (Debian's etcd-server), kube-apiserver,
// kube-controller-manager and kube-scheduler on 127.0.0.1, and a kubelet on a private
// containerd (Debian's, with runc and the CNI bridge plugin on a bridge of its own). The
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
	// StateDir holds the cluster's files: PKI, kubeconfigs, etcd's data, containerd's and
	// the kubelet's roots, the daemons' logs and pid files.
	StateDir = "/var/lib/diskprobe-k8s"
	// RunDir holds containerd's state and socket.
	RunDir   = "/run/diskprobe-k8s"
	lockFile = "/run/lock/diskprobe-k8s.lock"

	// Bridge is the pod network's bridge, private to the test cluster.
	Bridge = "dpk8s0"
	// PodSubnet is the pod network's addresses (host-local IPAM).
	PodSubnet = "10.244.213.0/24"
	// ServiceSubnet is where ClusterIPs come from; they are not routed (no kube-proxy).
	ServiceSubnet = "10.96.213.0/24"

	// PauseImage is the sandbox image, built from ./pause.
	PauseImage = "localhost/diskprobe-k8s-pause:1"

	// Version is the Kubernetes release the cluster runs (scripts/tools.sh pins it).
	Version = "v1.34.1"
)

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
	Server     string // https://127.0.0.1:PORT
	CAFile     string
	// CertFile and KeyFile are the admin's client certificate, for programs that take no
	// kubeconfig (prometheus-operator, a Prometheus outside the cluster).
	CertFile, KeyFile string
	Node              string // the node's name (the host name)
	Containerd        string // containerd's socket

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
)

// BringUp is how long the cluster took to come up, for the tests' reports.
var BringUp time.Duration

// TeardownTime is how long its teardown took.
var TeardownTime time.Duration

// Main runs the tests and tears down the cluster if one was brought up; its result is the
// exit code. SIGINT and SIGTERM tear it down too.
func Main(m *testing.M) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "k8senv: %v: tearing the test cluster down\n", s)
		shutdown()
		runHostCleanups()
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
		cluster, upErr = up(binDir)
		BringUp = time.Since(start)
		if upErr == nil {
			t.Logf("k8senv: Kubernetes %s up in %v", Version, BringUp.Round(100*time.Millisecond))
		}
	}
	if upErr != nil {
		t.Fatalf("bringing up the test cluster: %v", upErr)
	}
	return cluster
}

func up(binDir string) (c *Cluster, err error) {
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
	if err := c.start(); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{StateDir}, p...)...) }

func (c *Cluster) start() error {
	for _, d := range []string{StateDir, RunDir, c.path("log"), c.path("pid")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := saveSysctls(c.path("sysctls")); err != nil {
		return err
	}
	if err := recordNetns(c.path("netns-before")); err != nil {
		return err
	}
	if err := recordHostState(c.path("host-before")); err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	c.Node = strings.ToLower(host)
	ports, err := freePorts(8)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, cmPort, schedPort, kubeletPort, kubeletHealthz := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	svcIP := "10.96.213.1"
	for _, is := range []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", svcIP}},
		{"admin", "kubernetes-admin", []string{"system:masters"}, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kubelet", "system:node:" + c.Node, []string{"system:nodes"}, nil},
		{"kubelet-serving", c.Node, nil, append([]string{c.Node, "127.0.0.1", "localhost"}, hostIPs()...)},
		{"sa", "service-accounts", nil, nil},
	} {
		if err := p.issue(is.name, is.cn, is.orgs, is.hosts...); err != nil {
			return err
		}
	}
	c.CAFile, c.CertFile, c.KeyFile = p.file("ca.crt"), p.file("admin.crt"), p.file("admin.key")
	c.Kubeconfig = c.path("admin.kubeconfig")
	for _, n := range []string{"admin", "controller-manager", "scheduler", "kubelet"} {
		if err := p.kubeconfig(c.path(n+".kubeconfig"), c.Server, n); err != nil {
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
	if err := c.waitHTTP("etcd", etcdURL+"/health", false, time.Minute); err != nil {
		return err
	}

	// kube-apiserver
	if err := c.run("kube-apiserver", c.bin("kube-apiserver"),
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort), "--cert-dir="+c.path("apiserver-certs"),
		"--endpoint-reconciler-type=none", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--kubelet-preferred-address-types=Hostname,InternalIP",
		"--service-cluster-ip-range="+ServiceSubnet,
		"--client-ca-file="+p.file("ca.crt"),
		"--tls-cert-file="+p.file("apiserver.crt"), "--tls-private-key-file="+p.file("apiserver.key"),
		"--kubelet-client-certificate="+p.file("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p.file("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+p.file("ca.crt"),
		"--service-account-key-file="+p.file("sa.key"), "--service-account-signing-key-file="+p.file("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc"); err != nil {
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

	if err := c.startContainerd(); err != nil {
		return err
	}
	if err := c.startKubelet(p, kubeletPort, kubeletHealthz); err != nil {
		return err
	}
	// Like kubeadm's control-plane node: the label (a kubelet may not set node-role labels
	// on itself) and the taint (registered by the kubelet).
	if err := c.waitFor("node "+c.Node+" Ready", 2*time.Minute, func() bool {
		out, err := c.kubectl("get", "node", c.Node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True"
	}); err != nil {
		return err
	}
	if out, err := c.kubectl("label", "node", c.Node, "node-role.kubernetes.io/control-plane="); err != nil {
		return fmt.Errorf("labelling the node: %v\n%s", err, out)
	}
	// Pods need their namespace's default ServiceAccount, made by the controller-manager.
	return c.waitFor("the default ServiceAccount", time.Minute, func() bool {
		_, err := c.kubectl("get", "serviceaccount", "default", "-n", "default")
		return err == nil
	})
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.BinDir, name) }

func (c *Cluster) startContainerd() error {
	c.Containerd = filepath.Join(RunDir, "containerd.sock")
	cni := c.path("cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	// restrict_oom_score_adj: root in these VMs lacks CAP_SYS_RESOURCE, and a sandbox
	// asking for oom_score_adj -998 makes runc fail ("can't get final child's PID from pipe").
	conf := fmt.Sprintf(`version = 2
root = %q
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
`, c.path("containerd"), filepath.Join(RunDir, "containerd"), c.Containerd, c.Containerd+".ttrpc",
		c.path("containerd-opt"), PauseImage, cni)
	if err := os.WriteFile(c.path("containerd.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	// No masquerading (no iptables rules): pods are reached from the host only.
	netconf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "diskprobe-k8s",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": false,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`, Bridge, c.path("ipam"), PodSubnet)
	if err := os.WriteFile(filepath.Join(cni, "10-diskprobe-k8s.conflist"), []byte(netconf), 0o644); err != nil {
		return err
	}
	if err := c.run("containerd", "containerd", "--config", c.path("containerd.toml")); err != nil {
		return err
	}
	if err := c.waitFor("containerd", time.Minute, func() bool {
		return exec.Command("ctr", "--address", c.Containerd, "version").Run() == nil
	}); err != nil {
		return err
	}
	return c.importPause()
}

func (c *Cluster) startKubelet(p *pki, port, healthz int) error {
	root := c.path("kubelet")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	// cgroupfs and failCgroupV1 false: these kernels run hybrid cgroup v1. Image garbage
	// collection off: nothing imported can be pulled again.
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
tlsCertFile: %q
tlsPrivateKeyFile: %q
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
registerWithTaints:
  - {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}
evictionHard: {memory.available: 1Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
`, port, healthz, p.file("ca.crt"), p.file("kubelet-serving.crt"), p.file("kubelet-serving.key"), c.Containerd, c.path("pod-logs"))
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	return c.run("kubelet", c.bin("kubelet"), "--config="+c.path("kubelet.yaml"),
		"--kubeconfig="+c.path("kubelet.kubeconfig"), "--root-dir="+root, "--cert-dir="+c.path("kubelet-pki"))
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

// Ctr runs containerd's ctr in the CRI's k8s.io namespace.
func (c *Cluster) Ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", c.Containerd, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

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

func hostIPs() []string {
	var ips []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			ips = append(ips, n.IP.String())
		}
	}
	return ips
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
