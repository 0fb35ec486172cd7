// Package cluster installs the chart on a real single-node Kubernetes (tests/internal/k8senv) with
// the image `make image` builds, and checks what rendering cannot: scheduling onto a tainted
// control-plane node, the kubelet creating the probe directories, readiness through /-/ready,
// a rolling upgrade, a hung target, the example check Job, uninstall, and prometheus-operator
// turning the chart's ServiceMonitor and PrometheusRule into a scrape job and rules.
//
// Root only, skipped under -short; one cluster for the whole package. There is no kube-proxy:
// pods are reached at their pod IP from the host.
package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
)

// chartDir is the chart installed: this checkout's, or DISKPROBE_K8S_CHART (another copy of
// the chart directory, e.g. one vendored or unpacked from `helm pull`).
var chartDir = func() string {
	if d := os.Getenv("DISKPROBE_K8S_CHART"); d != "" {
		return d
	}
	return testenv.RepoPath("charts", "diskprobe-exporter")
}()

const (
	// metricsPort is the chart's containerPort.
	metricsPort = "10052"
	// etcdDir and etcdProbeDir are the etcd preset's paths on the node.
	etcdDir      = "/var/lib/etcd"
	etcdProbeDir = "/var/lib/diskprobe-etcd"
)

func TestMain(m *testing.M) {
	start := time.Now()
	code := k8senv.Main(m)
	if k8senv.BringUp > 0 {
		fmt.Fprintf(os.Stderr, "cluster tests: bring-up %v, teardown %v, package %v\n",
			k8senv.BringUp.Round(100*time.Millisecond), k8senv.TeardownTime.Round(100*time.Millisecond), time.Since(start).Round(time.Second))
	}
	os.Exit(code)
}

// env is what every test shares: the cluster, helm, and the image imported once.
type env struct {
	c    *k8senv.Cluster
	helm string
	tag  string // the chart's appVersion, which the image is tagged with
}

var (
	imageOnce sync.Once
	imageErr  error
)

func setup(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "make", "containerd", "ctr", "runc", "etcd")
	e := &env{helm: testenv.Helm(t), tag: appVersion(t)}
	e.c = k8senv.Get(t, testenv.ToolDir(t, "k8s"))
	imageOnce.Do(func() { imageErr = importImage(e) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return e
}

func appVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(testenv.Helm(t), "show", "chart", chartDir).Output()
	if err != nil {
		t.Fatalf("helm show chart %s: %v", chartDir, err)
	}
	data := out
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	return chart.AppVersion
}

// importImage builds the image with `make image`, tagged with the chart's appVersion, and
// imports it as docker.io/library/diskprobe-exporter:<tag>: the name the chart's default
// image (repository diskprobe-exporter, tag the appVersion) normalizes to.
func importImage(e *env) error {
	dist, err := os.MkdirTemp("", "diskprobe-k8s-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dist)
	start := time.Now()
	out, err := exec.Command("make", "-C", testenv.RepoPath(), "image", "TAG="+e.tag, "DIST="+dist).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make image: %v\n%s", err, out)
	}
	archive := filepath.Join(dist, "diskprobe-exporter-"+e.tag+".oci.tar")
	if err := e.c.ImportImage(archive, "docker.io/library/diskprobe-exporter:"+e.tag); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "cluster tests: make image and import: %v\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// tolerateControlPlane lets the pods of values other than the etcd preset (which tolerates
// it itself) onto the cluster's only node, tainted like a kubeadm control plane.
const tolerateControlPlane = `tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
`

// release is one helm release in a namespace of its own.
type release struct {
	e         *env
	name, ns  string
	valueArgs []string
}

// install runs helm install with the values files (paths, or YAML text written to a file)
// and waits for the DaemonSet's pods to be Ready unless noWait. The release, its
// namespace and every object in it are removed in cleanup. Nothing sets image.tag: the
// chart's default must name the image `make image` built.
func (e *env) install(t *testing.T, name string, noWait bool, values ...string) *release {
	t.Helper()
	r := &release{e: e, name: name, ns: "dp-" + name}
	r.valueArgs = []string{"--set", "image.pullPolicy=Never"}
	for i, v := range values {
		if strings.Contains(v, "\n") {
			p := filepath.Join(t.TempDir(), fmt.Sprintf("values-%d.yaml", i))
			if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
			v = p
		}
		r.valueArgs = append(r.valueArgs, "-f", v)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", r.describe())
		}
		r.uninstall(t)
	})
	args := append([]string{"install", name, chartDir, "-n", r.ns, "--create-namespace"}, r.valueArgs...)
	if !noWait {
		args = append(args, "--wait", "--timeout", "3m")
	}
	r.helm(t, args...)
	return r
}

func (r *release) helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(r.e.helm, append(args, "--kubeconfig", r.e.c.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (r *release) describe() string {
	out, _ := r.e.c.KubectlErr("-n", r.ns, "describe", "pods")
	logs, _ := r.e.c.KubectlErr("-n", r.ns, "logs", "-l", "app.kubernetes.io/instance="+r.name, "--tail=40", "--all-containers")
	ev, _ := r.e.c.KubectlErr("-n", r.ns, "get", "events", "--sort-by=.lastTimestamp")
	return out + "\nlogs:\n" + logs + "\nevents:\n" + ev
}

// namespacedKinds are every namespaced kind the chart makes.
var namespacedKinds = "daemonsets,pods,configmaps,services,serviceaccounts,secrets,servicemonitors.monitoring.coreos.com,podmonitors.monitoring.coreos.com,prometheusrules.monitoring.coreos.com"

// uninstall removes the release and waits until none of its objects and pods is left,
// then deletes the namespace.
func (r *release) uninstall(t *testing.T) {
	t.Helper()
	c := r.e.c
	if out, err := exec.Command(r.e.helm, "uninstall", r.name, "-n", r.ns, "--wait", "--timeout", "2m", "--kubeconfig", c.Kubeconfig).CombinedOutput(); err != nil && !strings.Contains(string(out), "not found") {
		t.Errorf("helm uninstall %s: %v\n%s", r.name, err, out)
	}
	if out, err := c.KubectlErr("delete", "namespace", r.ns, "--wait=true", "--timeout=2m", "--ignore-not-found"); err != nil {
		t.Errorf("deleting namespace %s: %v\n%s", r.ns, err, out)
	}
}

// pods are the release's pods, as the apiserver has them.
func (r *release) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	out := r.e.c.Kubectl(t, "-n", r.ns, "get", "pods", "-l", "app.kubernetes.io/instance="+r.name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// onePod waits for the release's single pod to be running with an IP and returns it.
func (r *release) onePod(t *testing.T) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	testenv.WaitFor(t, 3*time.Minute, "the release's pod running with a pod IP", func() bool {
		pods := r.pods(t)
		if len(pods) != 1 || pods[0].Status.PodIP == "" || pods[0].Status.Phase != corev1.PodRunning {
			return false
		}
		pod = pods[0]
		return true
	})
	return pod
}

// exporter is the pod's exporter, reached at its pod IP.
func exporter(p corev1.Pod) *testenv.Exporter {
	return &testenv.Exporter{Addr: p.Status.PodIP + ":" + metricsPort}
}

// ready is the status /-/ready answers at the pod.
func ready(p corev1.Pod) (int, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.Status.PodIP + ":" + metricsPort + "/-/ready")
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitSamples waits until the pod's exporter serves at least n samples of metric for target.
func waitSamples(t *testing.T, p corev1.Pod, metric, target string, n float64) {
	t.Helper()
	e := exporter(p)
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d %s samples of target %s", int(n), metric, target), func() bool {
		f, _, err := e.Scrape(5 * time.Second)
		if err != nil {
			return false
		}
		v, _ := testenv.Value(f, metric, map[string]string{"target": target})
		return v >= n
	})
}

// hostEtcd gives the node a /var/lib/etcd like kubeadm's (mode 0700, a file inside) for the
// test and puts back what was there. A directory holding anything (a real etcd's data) is
// never used: the test refuses, loudly. Debian's etcd-server package leaves an empty one.
func hostEtcd(t *testing.T) {
	t.Helper()
	if out, _ := exec.Command("findmnt", "-rn", etcdDir).Output(); len(out) > 0 {
		t.Fatalf("%s is a mount point on this machine: refusing to run over it", etcdDir)
	}
	if _, err := os.Stat(etcdProbeDir); err == nil {
		t.Fatalf("%s exists on this machine: refusing to run over it (remove it if it is a test's leftover)", etcdProbeDir)
	}
	fi, err := os.Stat(etcdDir)
	switch {
	case err == nil:
		entries, err := os.ReadDir(etcdDir)
		if err != nil || len(entries) > 0 {
			t.Fatalf("%s holds %d entries (%v): it may be a real etcd's data directory; refusing to touch it", etcdDir, len(entries), err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode, uid, gid := fi.Mode().Perm(), int(st.Uid), int(st.Gid)
		k8senv.Cleanup(t, func() {
			entries, _ := os.ReadDir(etcdDir)
			for _, e := range entries {
				os.RemoveAll(filepath.Join(etcdDir, e.Name()))
			}
			_ = os.Chmod(etcdDir, mode)
			_ = os.Chown(etcdDir, uid, gid)
		})
	case os.IsNotExist(err):
		if err := os.Mkdir(etcdDir, 0o700); err != nil {
			t.Fatal(err)
		}
		k8senv.Cleanup(t, func() { os.RemoveAll(etcdDir) })
	default:
		t.Fatal(err)
	}
	if err := os.Chmod(etcdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(etcdDir, 0, 0)
	fillEtcdDir(t, etcdDir)
}

// fillEtcdDir puts what etcd would keep in its data directory (member/wal, member/snap).
func fillEtcdDir(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"member/wal", "member/snap"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "member/wal/0000000000000000-0000000000000000.wal"), bytes.Repeat([]byte("wal"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "member/snap/db"), bytes.Repeat([]byte("db"), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tree is a directory's listing: each entry's path, mode, owner, size and content hash.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d %d", p, fi.Mode(), st.Uid, st.Gid, fi.Size())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			line += " " + hex.EncodeToString(sum[:8])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// removeAfter removes dir in cleanup: the probe directories the kubelet creates stay on the
// node after uninstall (README says so), and a test must not leave them.
func removeAfter(t *testing.T, dir string) {
	k8senv.Cleanup(t, func() { os.RemoveAll(dir) })
}
