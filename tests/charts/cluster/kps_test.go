package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
)

// TestReadmeInstallOnThreeEtcdMembersUnseenByKubePrometheusStack runs README.md's install
// commands as written (the chart pulled as `helm package` publishes it; the only addition is
// image.tag, the development build's) on three control-plane nodes whose /var/lib/etcd hold a
// member's data, with prometheus-operator configured as kube-prometheus-stack configures it
// (selectors on release=kube-prometheus-stack). Then, in one Prometheus 3 running what the
// operator generates:
//   - every member is scraped (up, instance the node's name) and the chart's recording rules
//     answer per member, the peer group's median among them;
//   - a rolling `helm upgrade` to another image replaces one node's pod at a time: at no
//     moment are two nodes without a Ready pod, and each new pod is created only after the
//     one before it became Ready;
//   - one member's disk slowed (blkio throttle of its pod's writes) stands apart from the
//     other two in the chart's own series;
//   - `helm uninstall` and the documented cleanup Job leave nothing of ours on any node, and
//     etcd's directories as they were.
func TestReadmeInstallOnThreeEtcdMembersUnseenByKubePrometheusStack(t *testing.T) {
	e := setup(t)
	if len(e.c.Nodes) < 3 {
		t.Fatalf("%d nodes: the test needs three etcd members", len(e.c.Nodes))
	}
	kps := e.kubePrometheusStack(t)
	members := etcdMembers(t, e)

	sh := e.shell(t)
	var rel, ns string
	start := time.Now()
	var notes string
	for _, line := range readmeInstall(t) {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "helm pull "):
			sh.pullChart(t, line)
		case strings.HasPrefix(line, "kubectl create namespace "):
			ns = f[3]
			t.Cleanup(func() {
				if out, err := e.c.KubectlErr("delete", "namespace", ns, "--wait=true", "--timeout=2m", "--ignore-not-found"); err != nil {
					t.Errorf("deleting namespace %s: %v\n%s", ns, err, out)
				}
			})
			sh.run(t, line)
		case strings.HasPrefix(line, "helm install "):
			rel = f[2]
			t.Cleanup(func() {
				if t.Failed() {
					r := &release{e: e, name: rel, ns: ns}
					t.Logf("pods:\n%s", r.describe())
				}
				_, _ = sh.try(fmt.Sprintf("helm uninstall %s -n %s --wait --timeout 2m", rel, ns))
			})
			notes = sh.run(t, line+" --set image.tag="+e.tag)
		default:
			sh.run(t, line)
		}
	}
	if rel == "" || ns == "" {
		t.Fatalf("README.md's install block creates no namespace or installs no release")
	}
	t.Logf("README's install: %v; NOTES:\n%s", time.Since(start).Round(100*time.Millisecond), notes)
	for _, want := range []string{"ServiceMonitor " + rel, "PrometheusRule " + rel, "release=" + kpsRelease, "rollout status daemonset/" + rel} {
		if !strings.Contains(notes, want) {
			t.Errorf("helm install's NOTES do not say %q", want)
		}
	}
	for _, unwanted := range []string{"Skipped", "No `release` label"} {
		if strings.Contains(notes, unwanted) {
			t.Errorf("helm install's NOTES say %q on a cluster with the operator and the release label set", unwanted)
		}
	}

	r := &release{e: e, name: rel, ns: ns}
	pods := r.runningPods(t, len(e.c.Nodes))
	for _, n := range e.c.Nodes {
		if _, ok := pods[n.Name]; !ok {
			t.Errorf("no pod on %s", n.Name)
		}
		testenv.WaitFor(t, time.Minute, n.Name+"'s probe files beside etcd's directory", func() bool {
			_, err := os.Stat(n.Path(filepath.Join(etcdProbeDir, ".diskprobe")))
			return err == nil
		})
	}

	// Beside it, the chart's PodMonitor over TLS and basic auth (another release, on one node).
	tls := e.tlsRelease(t)

	// What kube-prometheus-stack's Prometheus makes of it.
	cfg, rules := kps.generated(t, "serviceMonitor/"+ns+"/", "podMonitor/"+tls.ns+"/")
	prom := kps.startPrometheus(t, cfg, rules)
	names := nodeNames(e)
	kps.wait(t, 3*time.Minute, "up and a recorded p99 for every member", func() bool {
		up, err1 := byInstance(prom, `up{job="diskprobe-exporter"} == 1`)
		p99, err2 := byInstance(prom, `target:diskprobe_fdatasync_duration_seconds:quantile_rate5m{quantile="0.99",target="etcd"}`)
		return err1 == nil && err2 == nil && sameKeys(up, names) && sameKeys(p99, names)
	})
	// etcd's second number: the preset's commit probe, served by every member.
	kps.wait(t, 3*time.Minute, "commits of the etcd preset's commit probe from every member", func() bool {
		n, err := byInstance(prom, `diskprobe_commit_duration_seconds_count{target="etcd"} > 0`)
		return err == nil && sameKeys(n, names)
	})
	// The peer group: three members of one job and target, their median recorded.
	kps.wait(t, 3*time.Minute, "the peer group's median member", func() bool {
		n, err := prom.SeriesCount(`peers:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m_median{target="etcd"}`)
		return err == nil && n == 1
	})
	t.Logf("scraped and recorded for %v, %v after install", names, time.Since(start).Round(time.Second))
	kps.wait(t, 2*time.Minute, "the PodMonitor's target up over TLS with basic auth", func() bool {
		up, err := byInstance(prom, `up{job="diskprobe-exporter",namespace="`+tls.ns+`"} == 1`)
		return err == nil && sameKeys(up, names[:1])
	})
	if !strings.Contains(cfg, "scheme: https") || !strings.Contains(cfg, "server_name: diskprobe-exporter") {
		t.Errorf("the PodMonitor's scrape job is not https with the certificate's name:\n%s", cfg)
	}

	t.Run("RollingUpgradeReplacesOneNodeAtATime", func(t *testing.T) {
		upgradeOneNodeAtATime(t, e, sh, r)
	})
	if t.Failed() {
		return
	}
	t.Run("SlowedMemberStandsApart", func(t *testing.T) {
		slowedMemberStandsApart(t, e, kps, r)
	})

	// Uninstall, then the documented cleanup on every node.
	_ = kps.proc.Cmd.Process.Kill()
	if out, err := sh.try(fmt.Sprintf("helm uninstall %s -n %s --wait --timeout 2m", rel, ns)); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	r.nothingLeft(t)
	cleanupEveryNode(t, e, sh, ns)
	for _, n := range e.c.Nodes {
		if _, err := os.Lstat(n.Path(etcdProbeDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s is left after the cleanup Job: %v", n.Name, etcdProbeDir, err)
		}
		if after := tree(t, n.Path(etcdDir)); after != members[n.Name] {
			t.Errorf("%s: %s changed:\nbefore:\n%s\nafter:\n%s", n.Name, etcdDir, members[n.Name], after)
		}
	}
}

func sameKeys(m map[string]float64, keys []string) bool {
	if len(m) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// upgradeOneNodeAtATime runs `helm upgrade` to the next image while it watches the release's
// pods, event by event.
func upgradeOneNodeAtATime(t *testing.T, e *env, sh *shell, r *release) {
	type event struct {
		Type   string     `json:"type"`
		Object corev1.Pod `json:"object"`
	}
	watch := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), "--kubeconfig", e.c.Kubeconfig, "-n", r.ns, "get", "pods",
		"-l", "app.kubernetes.io/instance="+r.name, "--watch", "--output-watch-events", "-o", "json")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		pods   = map[string]corev1.Pod{}
		worst  int      // most nodes without a Ready pod at once
		order  []string // new pods, in the order they were first seen
		readyN = map[string]int{}
		seenN  = map[string]int{}
		n      int
		armed  bool // the watch's initial listing is in: the invariant holds from here on
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		dec := json.NewDecoder(stdout)
		for {
			var ev event
			if err := dec.Decode(&ev); err != nil {
				return
			}
			mu.Lock()
			n++
			p := ev.Object
			if ev.Type == "DELETED" {
				delete(pods, p.Name)
			} else {
				pods[p.Name] = p
			}
			if strings.HasSuffix(p.Spec.Containers[0].Image, ":"+e.nextTag) {
				if _, ok := seenN[p.Name]; !ok {
					seenN[p.Name] = n
					order = append(order, p.Name)
				}
				if _, ok := readyN[p.Name]; !ok && podReady(p) && p.DeletionTimestamp == nil {
					readyN[p.Name] = n
				}
			}
			serving := map[string]bool{}
			for _, q := range pods {
				if podReady(q) && q.DeletionTimestamp == nil {
					serving[q.Spec.NodeName] = true
				}
			}
			if down := len(e.c.Nodes) - len(serving); armed && down > worst {
				worst = down
			}
			mu.Unlock()
		}
	}()
	defer func() {
		_ = watch.Process.Kill()
		_ = watch.Wait()
		<-done
	}()
	testenv.WaitFor(t, time.Minute, "the watch listing every node's Ready pod", func() bool {
		mu.Lock()
		defer mu.Unlock()
		serving := map[string]bool{}
		for _, q := range pods {
			if podReady(q) && q.DeletionTimestamp == nil {
				serving[q.Spec.NodeName] = true
			}
		}
		armed = len(serving) == len(e.c.Nodes)
		return armed
	})
	start := time.Now()
	out := sh.run(t, fmt.Sprintf("helm upgrade %s ./diskprobe-exporter -n %s --reuse-values --set image.tag=%s --wait --timeout 5m", r.name, r.ns, e.nextTag))
	testenv.WaitFor(t, 2*time.Minute, "every node's pod replaced and Ready", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(readyN) == len(e.c.Nodes)
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("helm upgrade: %v, %d pod events\n%s", time.Since(start).Round(100*time.Millisecond), n, lastLines(out, 3))
	if worst > 1 {
		t.Errorf("at one moment %d nodes had no Ready pod: the update must replace one node's pod at a time (maxUnavailable 1)", worst)
	}
	if len(order) != len(e.c.Nodes) {
		t.Fatalf("new pods %v, want one per node", order)
	}
	for i := 1; i < len(order); i++ {
		if seenN[order[i]] < readyN[order[i-1]] {
			t.Errorf("new pod %s appeared (event %d) before %s was Ready (event %d): pods replaced at once, not one at a time",
				order[i], seenN[order[i]], order[i-1], readyN[order[i-1]])
		}
	}
	nodes := map[string]bool{}
	for _, name := range order {
		nodes[pods[name].Spec.NodeName] = true
	}
	if len(nodes) != len(e.c.Nodes) {
		t.Errorf("the new pods run on %v, want every node", nodes)
	}
}

// slowedMemberStandsApart throttles the writes of one member's pod to its node's disk (the
// blkio controller, the node's loop device) and waits until the chart's rules, as Prometheus
// evaluates them, show that member's fdatasync far above the other two: its median of the
// last 5 minutes and its mean of the last minute, each at least 10 times the slowest other
// member's (side by side, no absolute time). The p99 is logged, not judged: on this shared
// machine a healthy member's p99 reaches tens of milliseconds now and then.
func slowedMemberStandsApart(t *testing.T, e *env, kps *stack, r *release) {
	slow := e.c.Nodes[1]
	pods := r.runningPods(t, len(e.c.Nodes))
	throttlePodWrites(t, slow, pods[slow.Name], 10)
	start := time.Now()
	var p50, p99, mean map[string]float64
	kps.wait(t, 4*time.Minute, slow.Name+"'s fdatasync apart from the others'", func() bool {
		var err1, err2, err3 error
		// The rules record the p99 only (issue 31 dropped the quantiles nothing read): the median here.
		p50, err1 = byInstance(kps.prom, `histogram_quantile(0.5, sum by (instance, le) (rate(diskprobe_fdatasync_duration_seconds_bucket{target="etcd"}[5m])))`)
		p99, err2 = byInstance(kps.prom, `target:diskprobe_fdatasync_duration_seconds:quantile_rate5m{quantile="0.99",target="etcd"}`)
		mean, err3 = byInstance(kps.prom, `instance:diskprobe_fdatasync_duration_seconds:mean_rate1m{target="etcd"}`)
		return err1 == nil && err2 == nil && err3 == nil && apart(p50, slow.Name, 10) && apart(mean, slow.Name, 10)
	})
	t.Logf("%s throttled to 10 write IOPS: apart after %v; by member, median %v, mean of the last minute %v, p99 %v",
		slow.Name, time.Since(start).Round(time.Second), p50, mean, p99)
}

// apart: member's value is at least factor times every other member's.
func apart(v map[string]float64, member string, factor float64) bool {
	m, ok := v[member]
	if !ok || len(v) < 3 {
		return false
	}
	for k, x := range v {
		if k != member && m < factor*x {
			return false
		}
	}
	return true
}

// throttlePodWrites limits the writes of the pod's container to the node's disk to iops a
// second, in the container's own blkio cgroup (cgroup v1 throttles the processes of a cgroup
// itself, not its children), until the test ends.
func throttlePodWrites(t *testing.T, n *k8senv.Node, pod corev1.Pod, iops int) {
	t.Helper()
	if len(pod.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", pod.Name)
	}
	id := pod.Status.ContainerStatuses[0].ContainerID
	id = id[strings.Index(id, "://")+3:]
	qos := strings.ToLower(string(pod.Status.QOSClass))
	dir := filepath.Join("/sys/fs/cgroup/blkio", n.CgroupRoot, "kubepods", qos, "pod"+string(pod.UID), id)
	if qos == "guaranteed" {
		dir = filepath.Join("/sys/fs/cgroup/blkio", n.CgroupRoot, "kubepods", "pod"+string(pod.UID), id)
	}
	if _, err := os.Stat(filepath.Join(dir, "blkio.throttle.write_iops_device")); err != nil {
		t.Skipf("needs blkio cgroup v1 throttling of the container's cgroup: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(n.Disk, &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	file := filepath.Join(dir, "blkio.throttle.write_iops_device")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%s %d", dev, iops)), 0o644); err != nil {
		t.Fatalf("throttling %s in %s: %v", dev, dir, err)
	}
	t.Cleanup(func() { _ = os.WriteFile(file, []byte(dev+" 0"), 0o644) })
}

// nothingLeft waits until no object of a namespaced kind the chart makes is left in the
// release's namespace after helm uninstall (the prometheus-operator kinds where served).
func (r *release) nothingLeft(t *testing.T) {
	t.Helper()
	e := r.e
	kinds := namespacedKinds
	if _, err := e.c.KubectlErr("get", "crd", "servicemonitors.monitoring.coreos.com"); err != nil {
		kinds = "daemonsets,pods,configmaps,services,serviceaccounts,secrets,networkpolicies"
	}
	// What Kubernetes itself puts in every namespace stays: the default ServiceAccount and
	// the kube-root-ca.crt ConfigMap. Pods are removed by the garbage collector after their
	// DaemonSet: allow them to go.
	var left []string
	deadline := time.Now().Add(time.Minute)
	for {
		left = nil
		for _, o := range strings.Fields(e.c.Kubectl(t, "-n", r.ns, "get", kinds, "-o", "name")) {
			if o != "serviceaccount/default" && o != "configmap/kube-root-ca.crt" {
				left = append(left, o)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
}

// cleanupEveryNode runs examples/kubernetes/cleanup-job.yaml's commands as its comment gives
// them, in namespace ns: every control-plane node cleaned by its own pod.
func cleanupEveryNode(t *testing.T, e *env, sh *shell, ns string) {
	t.Helper()
	job, cmds := sh.exampleJob(t, "cleanup-job.yaml")
	if n := int(*job.Spec.Completions); n != len(e.c.Nodes) {
		t.Fatalf("cleanup-job.yaml has %d completions, the cluster %d control-plane nodes", n, len(e.c.Nodes))
	}
	for _, c := range cmds {
		c = strings.Replace(c, "-n diskprobe ", "-n "+ns+" ", 1)
		out := sh.run(t, c)
		if strings.Contains(c, " logs ") {
			t.Logf("%s:\n%s", c, out)
			if strings.Count(out, etcdProbeDir+"\n") != len(e.c.Nodes) {
				t.Errorf("the cleanup Job's pods removed %s on %d nodes, want %d", etcdProbeDir, strings.Count(out, etcdProbeDir+"\n"), len(e.c.Nodes))
			}
		}
	}
}
