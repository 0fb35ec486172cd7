// Package cluster installs the chart on a real Kubernetes of three control-plane nodes
// (tests/internal/k8senv: three kubelets, each with its own network, its own /var/lib disk
// and its own containerd) with the image `make image` builds, and checks what rendering cannot:
// the README's install as kube-prometheus-stack's Prometheus sees it on three etcd members (a
// rolling upgrade one node at a time, one member's slowed disk apart from the others, the
// cleanup of every node after uninstall; beside it a PodMonitor over TLS), a Prometheus
// without the operator scraping a default-deny namespace through the chart's NetworkPolicy,
// Pod Security baseline and the documented fix, the check of every control-plane node in one
// command, an etcd disk of its own, a raw block device, a hung target, an upgrade reusing
// the node's probe files, and storage classes (local-path-provisioner on loop-backed
// directories, local block volumes, a class nothing provisions) probed per node and timed
// by the arrival prober.
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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
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
	// etcdDir and etcdProbeDir are the etcd preset's paths on a node.
	etcdDir      = "/var/lib/etcd"
	etcdProbeDir = "/var/lib/diskprobe-etcd"
)

func TestMain(m *testing.M) {
	start := time.Now()
	code := testenv.Main(func() int { return k8senv.Main(m, k8senv.MaxNodes) })
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
	// tag is the development tag `make image` built the image under, which every install
	// passes as image.tag (a development build never carries the release's tag); nextTag
	// is the same image under another tag, a new version to upgrade to.
	tag, nextTag string
	// images are the references the rendered chart asks for with tag and nextTag, as the
	// kubelet normalizes them, each imported into every node.
	image, nextImage string
}

var (
	imageOnce sync.Once
	imageErr  error
	images    [2]string
)

func setup(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "make", "containerd", "ctr", "runc", "etcd", "nsenter", "unshare", "losetup", "mkfs.ext4")
	v := chartVersion(t)
	e := &env{helm: framework.Helm(t), tag: v + "-dev.clustertest", nextTag: v + "-dev.clustertest.2"}
	e.c = k8senv.Get(t, framework.ToolDir(t, "k8s"))
	imageOnce.Do(func() { imageErr = importImage(t, e) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	e.image, e.nextImage = images[0], images[1]
	return e
}

// chartVersion is the chart's version (and appVersion: tests/charts holds them equal).
func chartVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(framework.Helm(t), "show", "chart", chartDir).Output()
	if err != nil {
		t.Fatalf("helm show chart %s: %v", chartDir, err)
	}
	var chart struct {
		Version string `yaml:"version"`
	}
	if err := yaml.Unmarshal(out, &chart); err != nil || chart.Version == "" {
		t.Fatalf("Chart.yaml: no version (%v)", err)
	}
	return chart.Version
}

// importImage builds the image with `make image` under the development tag and imports it
// into every node under the exact reference the rendered chart asks for with that tag (and
// with the next one).
func importImage(t *testing.T, e *env) error {
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
	archives, _ := filepath.Glob(filepath.Join(dist, "*.oci.tar"))
	if len(archives) != 1 {
		return fmt.Errorf("make image wrote %v to %s, want one .oci.tar", archives, dist)
	}
	for i, tag := range []string{e.tag, e.nextTag} {
		ref, err := renderedImage(e, tag)
		if err != nil {
			return err
		}
		images[i] = normalizeImage(ref)
		if err := e.c.ImportImage(archives[0], images[i]); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "cluster tests: make image and import into %d nodes: %v\n", len(e.c.Nodes), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// renderedImage is the image the chart's DaemonSet asks for with image.tag=tag.
func renderedImage(e *env, tag string) (string, error) {
	out, err := exec.Command(e.helm, "template", "probe", chartDir, "--set", "image.tag="+tag, "--show-only", "templates/daemonset.yaml").Output()
	if err != nil {
		return "", fmt.Errorf("helm template: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := sigsyaml.Unmarshal(out, &ds); err != nil {
		return "", err
	}
	return ds.Spec.Template.Spec.Containers[0].Image, nil
}

// normalizeImage is the reference containerd's CRI looks up for a pod's image: a name with no
// registry is Docker Hub's, in library/ when it has no path.
func normalizeImage(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !found {
		return "docker.io/library/" + first
	}
	return "docker.io/" + first + "/" + rest
}

// onNode pins a release's pods to one node, tolerating its control-plane taint (the etcd preset
// tolerates it itself).
func onNode(n *k8senv.Node) string {
	return fmt.Sprintf(`nodeSelector:
  kubernetes.io/hostname: %s
tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
`, n.Name)
}

// release is one helm release in a namespace of its own.
type release struct {
	e         *env
	name, ns  string
	valueArgs []string
	notes     string // what helm install printed
}

// install creates the namespace (labelled for Pod Security privileged, as documented), runs
// helm install with the values files (paths, or YAML text written to a file) and waits for
// the DaemonSet's pods to be Ready unless noWait. The release, its namespace and every object
// in it are removed in cleanup.
func (e *env) install(t *testing.T, name string, noWait bool, values ...string) *release {
	t.Helper()
	r := &release{e: e, name: name, ns: "dp-" + name}
	r.valueArgs = []string{"--set", "image.tag=" + e.tag}
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
	// The namespace goes after the release (cleanups run last first).
	e.namespace(t, r.ns, "privileged")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", r.describe())
		}
		r.uninstall(t)
	})
	args := append([]string{"install", name, chartDir, "-n", r.ns}, r.valueArgs...)
	if !noWait {
		args = append(args, "--wait", "--timeout", "3m")
	}
	r.notes = r.helm(t, args...)
	return r
}

// namespace creates a namespace enforcing the Pod Security level, deleted in cleanup.
func (e *env) namespace(t *testing.T, ns, level string) {
	t.Helper()
	e.c.Kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if out, err := e.c.KubectlErr("delete", "namespace", ns, "--wait=true", "--timeout=2m", "--ignore-not-found"); err != nil {
			t.Errorf("deleting namespace %s: %v\n%s", ns, err, out)
		}
	})
	e.c.Kubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce="+level)
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
	out, _ := r.e.c.KubectlErr("-n", r.ns, "describe", "daemonset,pods")
	logs, _ := r.e.c.KubectlErr("-n", r.ns, "logs", "-l", "app.kubernetes.io/instance="+r.name, "--tail=40", "--all-containers", "--prefix")
	ev, _ := r.e.c.KubectlErr("-n", r.ns, "get", "events", "--sort-by=.lastTimestamp")
	return out + "\nlogs:\n" + logs + "\nevents:\n" + ev
}

// namespacedKinds are every namespaced kind the chart makes.
var namespacedKinds = "daemonsets,pods,configmaps,services,serviceaccounts,secrets,networkpolicies,servicemonitors.monitoring.coreos.com,podmonitors.monitoring.coreos.com,prometheusrules.monitoring.coreos.com"

// uninstall removes the release and waits until none of its objects and pods is left.
func (r *release) uninstall(t *testing.T) {
	t.Helper()
	c := r.e.c
	if out, err := exec.Command(r.e.helm, "uninstall", r.name, "-n", r.ns, "--wait", "--timeout", "2m", "--kubeconfig", c.Kubeconfig).CombinedOutput(); err != nil && !strings.Contains(string(out), "not found") {
		t.Errorf("helm uninstall %s: %v\n%s", r.name, err, out)
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

// runningPods waits for n pods of the release running with an IP, and returns them by node.
func (r *release) runningPods(t *testing.T, n int) map[string]corev1.Pod {
	t.Helper()
	byNode := map[string]corev1.Pod{}
	testenv.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d pods of the release running with a pod IP", n), func() bool {
		pods := r.pods(t)
		byNode = map[string]corev1.Pod{}
		for _, p := range pods {
			if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				byNode[p.Spec.NodeName] = p
			}
		}
		return len(pods) == n && len(byNode) == n
	})
	return byNode
}

// onePod waits for the release's single pod to be running with an IP and returns it.
func (r *release) onePod(t *testing.T) corev1.Pod {
	t.Helper()
	for _, p := range r.runningPods(t, 1) {
		return p
	}
	panic("unreachable")
}

// exporter is the pod's exporter, reached at its pod IP.
func exporter(p corev1.Pod) *framework.Exporter {
	return &framework.Exporter{Addr: p.Status.PodIP + ":" + metricsPort}
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
		v, _ := framework.Value(f, metric, map[string]string{"target": target})
		return v >= n
	})
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

// etcdMember gives each node's /var/lib/etcd (its disk's, mode 0700 like kubeadm's) what a
// member keeps there, emptied again in cleanup, and returns each one's listing.
func etcdMembers(t *testing.T, e *env) map[string]string {
	t.Helper()
	trees := map[string]string{}
	for _, n := range e.c.Nodes {
		dir := n.Path(etcdDir)
		fillEtcdDir(t, dir)
		k8senv.Cleanup(t, func() { _ = os.RemoveAll(filepath.Join(dir, "member")) })
		trees[n.Name] = tree(t, dir)
	}
	return trees
}

// tree is a directory's listing: each entry's path (from dir), mode, owner, size and content
// hash.
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
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v %d:%d %d", rel, fi.Mode(), st.Uid, st.Gid, fi.Size())
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

// removeAfter removes dir in cleanup: a test must not leave the probe directories the kubelet
// creates (the cleanup Job is tested where it is documented).
func removeAfter(t *testing.T, dir string) {
	k8senv.Cleanup(t, func() { os.RemoveAll(dir) })
}

// apply applies a manifest.
func apply(t *testing.T, e *env, ns, manifest string) {
	t.Helper()
	args := []string{"apply", "-f", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

// nodeNames are the cluster's nodes' names, sorted.
func nodeNames(e *env) []string {
	var names []string
	for _, n := range e.c.Nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}
