package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestEtcdPresetPendingOrUnreadyOnTaintedControlPlane installs the chart with the etcd preset
// alone on a node tainted and labelled like kubeadm's control plane, over a /var/lib/etcd like
// kubeadm's: the pod must be scheduled there, pass /-/ready, serve fdatasync samples, the
// kubelet must create the probe directory beside etcd's, and etcd's directory must be
// unchanged (listing, modes, contents) after uninstall.
func TestEtcdPresetPendingOrUnreadyOnTaintedControlPlane(t *testing.T) {
	e := setup(t)
	hostEtcd(t)
	removeAfter(t, etcdProbeDir)
	before := tree(t, etcdDir)

	start := time.Now()
	r := e.install(t, "etcd", false, chartDir+"/values-etcd.yaml")
	pod := r.onePod(t)
	t.Logf("installed and Ready in %v", time.Since(start).Round(100*time.Millisecond))
	if pod.Spec.NodeName != e.c.Node {
		t.Errorf("pod on node %q, want the control-plane node %q", pod.Spec.NodeName, e.c.Node)
	}
	if code, err := ready(pod); err != nil || code != 200 {
		t.Errorf("/-/ready answered %d (%v), want 200", code, err)
	}
	waitSamples(t, pod, "diskprobe_fdatasync_duration_seconds", "etcd", 1)
	t.Logf("fdatasync samples served %v after install", time.Since(start).Round(100*time.Millisecond))

	fi, err := os.Stat(etcdProbeDir)
	if err != nil || !fi.IsDir() {
		t.Fatalf("the kubelet did not create the probe directory %s: %v", etcdProbeDir, err)
	}
	if filepath.Dir(etcdProbeDir) != filepath.Dir(etcdDir) {
		t.Fatalf("probe directory %s is not beside %s", etcdProbeDir, etcdDir)
	}
	if _, err := os.Stat(filepath.Join(etcdProbeDir, ".diskprobe")); err != nil {
		t.Errorf("no probe files in %s: %v", etcdProbeDir, err)
	}

	r.uninstall(t)
	if after := tree(t, etcdDir); after != before {
		t.Errorf("%s changed:\nbefore:\n%s\nafter:\n%s", etcdDir, before, after)
	}
	_ = testenv.Value
}
