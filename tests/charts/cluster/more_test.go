package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
)

// TestEtcdPresetOnMountedEtcdDiskRefusedOrWritingInsideEtcdData runs the etcd preset with the
// alternative it documents for a disk of its own mounted at /var/lib/etcd (a loop device,
// ext4, mounted over the first node's /var/lib/etcd): probe_dir directly under the mount
// point. The pod must be Ready and serve fdatasync samples, the kubelet must create the probe
// directory under the mount point, and nothing else on that disk may change.
func TestEtcdPresetOnMountedEtcdDiskRefusedOrWritingInsideEtcdData(t *testing.T) {
	e := setup(t)
	node := e.c.Nodes[0]
	// Room for the preset's defaults: a 1 GiB free-space floor and a 256 MiB read file.
	dev := testenv.LoopDevice(t, 2<<30)
	testenv.Run(t, "mkfs.ext4", "-q", "-F", dev)
	if out, err := node.Exec("mount", dev, etcdDir); err != nil {
		t.Fatalf("mount %s on %s's %s: %v: %s", dev, node.Name, etcdDir, err, out)
	}
	k8senv.Cleanup(t, func() {
		if out, err := node.Exec("umount", etcdDir); err != nil {
			t.Errorf("umount %s on %s: %v: %s", etcdDir, node.Name, err, out)
		}
	})
	dir := node.Path(etcdDir)
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fillEtcdDir(t, dir)
	probeDir := filepath.Join(etcdDir, "diskprobe")
	before := tree(t, dir)

	r := e.install(t, "etcdmount", false, chartDir+"/values-etcd.yaml", onNode(node), `config:
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
	if _, err := os.Stat(filepath.Join(node.Path(probeDir), ".diskprobe")); err != nil {
		t.Errorf("no probe files under the mount point's %s: %v", probeDir, err)
	}
	r.uninstall(t)
	if err := os.RemoveAll(node.Path(probeDir)); err != nil {
		t.Fatal(err)
	}
	if after := tree(t, dir); after != before {
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
	r := e.install(t, "rawdev", false, onNode(e.c.Nodes[0]), fmt.Sprintf(`config:
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
	r := e.install(t, "upgrade", false, onNode(e.c.Nodes[0]), values("1s"))
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
	// The nodes see host mounts made after bring-up only under SharedDir.
	dir, err := os.MkdirTemp(k8senv.SharedDir, "hung")
	if err != nil {
		t.Fatal(err)
	}
	k8senv.Cleanup(t, func() { _ = os.Remove(dir) })
	testenv.BindMount(t, h.Dir, dir)
	h.Hang(testenv.OpStatfs)
	r := e.install(t, "hung", true, onNode(e.c.Nodes[0]), fmt.Sprintf(`config:
  targets:
    - name: hung
      path: %s
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
`, dir))
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

func sha256File(t *testing.T, path string) string {
	t.Helper()
	out := testenv.Run(t, "sha256sum", path)
	return strings.Fields(out)[0]
}
