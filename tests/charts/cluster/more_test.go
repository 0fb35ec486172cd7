package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
)

// TestEtcdPresetOnMountedEtcdDiskRefusedOrWritingInsideEtcdData runs the etcd preset with the
// alternative it documents for a disk of its own mounted at /var/lib/etcd (a loop device,
// ext4): probe_dir directly under the mount point. The pod must be Ready and serve
// fdatasync samples, the kubelet must create the probe directory under the mount point,
// and nothing else on that disk may change.
func TestEtcdPresetOnMountedEtcdDiskRefusedOrWritingInsideEtcdData(t *testing.T) {
	e := setup(t)
	testenv.RequireTools(t, "mkfs.ext4", "findmnt")
	hostEtcd(t) // the empty directory the disk is mounted over, put back afterwards
	// Room for the preset's defaults: a 1 GiB free-space floor and a 256 MiB read file.
	dev := testenv.LoopDevice(t, 2<<30)
	testenv.Run(t, "mkfs.ext4", "-q", "-F", dev)
	testenv.Run(t, "mount", dev, etcdDir)
	k8senv.Cleanup(t, func() {
		if err := syscall.Unmount(etcdDir, 0); err != nil {
			t.Errorf("umount %s: %v", etcdDir, err)
		}
	})
	if err := os.Chmod(etcdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	fillEtcdDir(t, etcdDir)
	probeDir := filepath.Join(etcdDir, "diskprobe")
	before := tree(t, etcdDir)

	r := e.install(t, "etcdmount", false, chartDir+"/values-etcd.yaml", `config:
  targets:
    - name: etcd
      path: /var/lib/etcd
      probe_dir: /var/lib/etcd/diskprobe
      fsync: {}
      randread: {}
      limits: {iops: 100, bandwidth: 20MiB}
`)
	pod := r.onePod(t)
	if code, err := ready(pod); err != nil || code != 200 {
		t.Errorf("/-/ready answered %d (%v), want 200", code, err)
	}
	waitSamples(t, pod, "diskprobe_fdatasync_duration_seconds", "etcd", 1)
	if _, err := os.Stat(filepath.Join(probeDir, ".diskprobe")); err != nil {
		t.Errorf("no probe files under the mount point's %s: %v", probeDir, err)
	}
	r.uninstall(t)
	if err := os.RemoveAll(probeDir); err != nil {
		t.Fatal(err)
	}
	if after := tree(t, etcdDir); after != before {
		t.Errorf("the etcd disk changed beyond %s:\nbefore:\n%s\nafter:\n%s", probeDir, before, after)
	}
}

// TestRawDeviceTargetDeniedByDeviceCgroup reads a loop device through the chart's block
// device values (privileged: auto): read samples served, the device's contents unchanged.
func TestRawDeviceTargetDeniedByDeviceCgroup(t *testing.T) {
	e := setup(t)
	dev := testenv.LoopDevice(t, 64<<20)
	testenv.FillRandom(t, dev, 8<<20)
	sum := sha256File(t, dev)
	r := e.install(t, "rawdev", false, tolerateControlPlane, fmt.Sprintf(`config:
  targets:
    - name: loop
      path: %s
      randread: {interval: 1s, ops: 5}
`, dev))
	pod := r.onePod(t)
	if c := pod.Spec.Containers[0].SecurityContext; c == nil || c.Privileged == nil || !*c.Privileged {
		t.Errorf("a block device target must make the container privileged (privileged: auto)")
	}
	waitSamples(t, pod, "diskprobe_read_duration_seconds", "loop", 5)
	r.uninstall(t)
	if sha256File(t, dev) != sum {
		t.Error("the loop device's contents changed")
	}
}

// TestUpgradeRollsPodsTogetherOrReprobesFromScratch changes the configuration with helm
// upgrade. On one node a DaemonSet with maxUnavailable 1 (the chart's) marks the old pod for
// deletion before it creates the new one (which can start while the old one terminates): the
// test asserts that order, that at no moment two pods are Ready or two are not terminating,
// and that the new pod becomes Ready, and that the unchanged target's new pod goes on with the
// node's probe files (the prepared read file is reused, same inode, no "preparing" skip)
// rather than starting over. The exporter keeps no counters across restarts: the new pod's
// counters start at zero (a counter reset, which rate() handles) and count up.
func TestUpgradeRollsPodsTogetherOrReprobesFromScratch(t *testing.T) {
	e := setup(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	values := func(bInterval string) string {
		return fmt.Sprintf(`config:
  targets:
    - name: a
      path: %s
      fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
      randread: {interval: 1s, ops: 5, file_size: 1MiB}
      limits:   {min_free: 1MiB}
    - name: b
      path: %s
      fsync:    {interval: %s, ops: 5, file_size: 1MiB}
      limits:   {min_free: 1MiB}
`, dirA, dirB, bInterval)
	}
	r := e.install(t, "upgrade", false, tolerateControlPlane, values("1s"))
	old := r.onePod(t)
	waitSamples(t, old, "diskprobe_read_duration_seconds", "a", 5)
	readProbe := filepath.Join(dirA, ".diskprobe", "read.probe")
	var st1 syscall.Stat_t
	if err := syscall.Stat(readProbe, &st1); err != nil {
		t.Fatalf("the read probe file of target a: %v", err)
	}

	// Watch the pods while helm upgrade rolls them.
	type sample struct {
		names       []string // pods not terminating
		terminating []string
		ready       map[string]bool
	}
	var (
		mu      sync.Mutex
		samples []sample
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := r.e.c.KubectlErr("-n", r.ns, "get", "pods", "-l", "app.kubernetes.io/instance="+r.name, "-o", "json")
			var list corev1.PodList
			if err == nil && json.Unmarshal([]byte(out), &list) == nil {
				s := sample{ready: map[string]bool{}}
				for _, p := range list.Items {
					if p.DeletionTimestamp != nil {
						s.terminating = append(s.terminating, p.Name)
					} else {
						s.names = append(s.names, p.Name)
					}
					s.ready[p.Name] = podReady(p)
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	args := append([]string{"upgrade", r.name, chartDir, "-n", r.ns, "--wait", "--timeout", "3m"}, r.valueArgs[:len(r.valueArgs)-2]...)
	p := filepath.Join(t.TempDir(), "values-upgrade.yaml")
	if err := os.WriteFile(p, []byte(values("2s")), 0o600); err != nil {
		t.Fatal(err)
	}
	r.helm(t, append(args, "-f", p)...)
	nw := r.onePod(t)
	close(stop)
	<-done

	if nw.Name == old.Name {
		t.Fatalf("helm upgrade with a changed config did not replace the pod %s", old.Name)
	}
	// The old pod is marked for deletion before the new one is created; it may still be
	// listed (terminating, not Ready) while the new one starts.
	oldGone, newSeen := -1, -1
	for i, s := range samples {
		if len(s.names) > 1 {
			t.Errorf("sample %d: %d pods not terminating at once on one node: %v", i, len(s.names), s.names)
		}
		nReady := 0
		for _, r := range s.ready {
			if r {
				nReady++
			}
		}
		if nReady > 1 {
			t.Errorf("sample %d: %d pods Ready at once on one node: %v", i, nReady, s.ready)
		}
		for _, n := range append(s.names, s.terminating...) {
			if n == nw.Name && newSeen < 0 {
				newSeen = i
			}
		}
		has := false
		for _, n := range s.names {
			has = has || n == old.Name
		}
		if !has && oldGone < 0 {
			oldGone = i
		}
	}
	if oldGone < 0 || newSeen < 0 || newSeen < oldGone {
		t.Errorf("want the old pod terminating (sample %d) before the new one appears (sample %d), of %d samples", oldGone, newSeen, len(samples))
	}
	testenv.WaitFor(t, 2*time.Minute, "the new pod Ready", func() bool {
		for _, p := range r.pods(t) {
			if p.Name == nw.Name && podReady(p) {
				return true
			}
		}
		return false
	})

	// The new pod goes on with the node's files: the read file prepared by the old pod is
	// reused, not written again (its first round checks it, then reads).
	waitSamples(t, nw, "diskprobe_read_duration_seconds", "a", 5)
	if logs := r.e.c.Kubectl(t, "-n", r.ns, "logs", nw.Name); !strings.Contains(logs, "reusing the prepared read probe file") {
		t.Errorf("the new pod did not reuse target a's prepared read file:\n%s", logs)
	}
	var st2 syscall.Stat_t
	if err := syscall.Stat(readProbe, &st2); err != nil {
		t.Fatal(err)
	}
	if st2.Ino != st1.Ino {
		t.Errorf("the read probe file of the unchanged target was made anew (inode %d, was %d)", st2.Ino, st1.Ino)
	}
}

// TestHungTargetPodReadyOrNotScrapeable runs a pod whose target's host path hangs (the FUSE
// fixture, statfs held: the kubelet and runc only stat a hostPath, the exporter's resolution
// also statfs's it) from before the exporter starts: the pod must stay unready (/-/ready
// 503, the Ready condition false) and still answer /metrics.
func TestHungTargetPodReadyOrNotScrapeable(t *testing.T) {
	e := setup(t)
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	h.Hang(testenv.OpStatfs)
	r := e.install(t, "hung", true, tolerateControlPlane, fmt.Sprintf(`config:
  targets:
    - name: hung
      path: %s
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
`, h.Dir))
	// Released before the uninstall (cleanups run last first), so nothing stays blocked.
	t.Cleanup(h.Release)
	pod := r.onePod(t)
	testenv.WaitFor(t, time.Minute, "the exporter answering", func() bool {
		_, _, err := exporter(pod).Scrape(5 * time.Second)
		return err == nil
	})
	h.WaitHeld(t, 1, 30*time.Second)
	if code, err := ready(pod); err != nil || code != 503 {
		t.Errorf("/-/ready answered %d (%v), want 503 while the target's path hangs", code, err)
	}
	// Long enough for the kubelet's readiness probe to have run a few times.
	time.Sleep(15 * time.Second)
	for _, p := range r.pods(t) {
		if podReady(p) {
			t.Errorf("pod %s is Ready while its target hangs", p.Name)
		}
	}
	f, _, err := exporter(pod).Scrape(10 * time.Second)
	if err != nil {
		t.Fatalf("the unready pod is not scrapeable: %v", err)
	}
	if _, ok := f["diskprobe_probe_inflight_seconds"]; !ok {
		t.Error("no diskprobe_probe_inflight_seconds from the pod with a hung target")
	}
}

// TestCheckJobExampleFailsToRunOrLosesVerdict runs examples/kubernetes/check-job.yaml as it
// is, with only nodeName set (as its comment says) and the image not pulled: the Job must
// end and its log hold the verdict.
func TestCheckJobExampleFailsToRunOrLosesVerdict(t *testing.T) {
	e := setup(t)
	hostEtcd(t)
	removeAfter(t, etcdProbeDir)
	before := tree(t, etcdDir)
	// The example beside the chart installed (this checkout's, or DISKPROBE_K8S_CHART's).
	data, err := os.ReadFile(filepath.Join(chartDir, "../../examples/kubernetes/check-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := sigsyaml.UnmarshalStrict(data, &job); err != nil {
		t.Fatal(err)
	}
	c := &job.Spec.Template.Spec.Containers[0]
	if want := "diskprobe-exporter:" + e.tag; c.Image != want {
		t.Fatalf("the example's image is %s, want %s (what make image tags, the chart's appVersion)", c.Image, want)
	}
	job.Spec.Template.Spec.NodeName = e.c.Node
	c.ImagePullPolicy = corev1.PullNever
	manifest, err := sigsyaml.Marshal(&job)
	if err != nil {
		t.Fatal(err)
	}
	ns := "dp-check"
	e.c.Kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() { _, _ = e.c.KubectlErr("delete", "namespace", ns, "--wait=true", "--timeout=2m") })
	apply := exec.Command(e.c.BinDir+"/kubectl", "--kubeconfig", e.c.Kubeconfig, "-n", ns, "apply", "-f", "-")
	apply.Stdin = bytes.NewReader(manifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	var status string
	testenv.WaitFor(t, 8*time.Minute, "the check Job to end", func() bool {
		out, err := e.c.KubectlErr("-n", ns, "get", "job", job.Name, "-o", "jsonpath={.status.succeeded}/{.status.failed}")
		status = out
		if reason, _ := e.c.KubectlErr("-n", ns, "get", "pods", "-l", "job-name="+job.Name, "-o", "jsonpath={.items[*].status.containerStatuses[*].state.waiting.reason}"); strings.Contains(reason, "ErrImage") || strings.Contains(reason, "BackOff") {
			t.Fatalf("the check Job's pod cannot start: %s\n%s", reason, e.c.Kubectl(t, "-n", ns, "describe", "pods"))
		}
		return err == nil && (strings.HasPrefix(out, "1/") || strings.HasSuffix(out, "/1"))
	})
	logs := e.c.Kubectl(t, "-n", ns, "logs", "job/"+job.Name)
	t.Logf("check Job (succeeded/failed %s), log:\n%s", status, logs)
	if !strings.Contains(logs, "PASS") && !strings.Contains(logs, "FAIL") {
		t.Error("the check Job's log holds no verdict (PASS or FAIL)")
	}
	e.c.Kubectl(t, "-n", ns, "delete", "job", job.Name, "--cascade=foreground", "--wait=true")
	if after := tree(t, etcdDir); after != before {
		t.Errorf("%s changed:\nbefore:\n%s\nafter:\n%s", etcdDir, before, after)
	}
}

// TestUninstallLeavesObjects installs with the defaults and uninstalls: no object of any
// namespaced kind the chart makes may be left in the namespace.
func TestUninstallLeavesObjects(t *testing.T) {
	e := setup(t)
	dir := t.TempDir()
	r := e.install(t, "uninstall", false, tolerateControlPlane, fmt.Sprintf("config:\n  targets:\n    - name: d\n      path: %s\n      fsync: {interval: 1s, ops: 5, file_size: 1MiB}\n      limits: {min_free: 1MiB}\n", dir))
	r.uninstallLeavesNothing(t)
}

// uninstallLeavesNothing runs helm uninstall and fails t for any object of a namespaced kind
// the chart makes left in the namespace (the prometheus-operator kinds where served).
func (r *release) uninstallLeavesNothing(t *testing.T) {
	t.Helper()
	e := r.e
	kinds := namespacedKinds
	if _, err := e.c.KubectlErr("get", "crd", "servicemonitors.monitoring.coreos.com"); err != nil {
		kinds = "daemonsets,pods,configmaps,services,serviceaccounts,secrets"
	}
	if out := e.c.Kubectl(t, "-n", r.ns, "get", kinds, "-o", "name"); !strings.Contains(out, "daemonset") {
		t.Fatalf("nothing installed? %s", out)
	}
	if out, err := exec.Command(e.helm, "uninstall", r.name, "-n", r.ns, "--wait", "--timeout", "2m", "--kubeconfig", e.c.Kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	// What Kubernetes itself puts in every namespace stays: the default ServiceAccount and
	// the kube-root-ca.crt ConfigMap.
	// Pods are removed by the garbage collector after their DaemonSet: allow them to go.
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
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	out := testenv.Run(t, "sha256sum", path)
	return strings.Fields(out)[0]
}
