package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestBaselineNamespaceDeploysADaemonSetWithNoPods installs the chart into a namespace that
// enforces Pod Security baseline, as a cluster's default or a shared namespace does, without
// --wait: Helm reports "deployed" while the DaemonSet has no pod and its events say why, as
// docs/kubernetes.md describes. The documented fix (label the namespace privileged, restart
// the rollout) then gives the node its Ready pod.
func TestBaselineNamespaceDeploysADaemonSetWithNoPods(t *testing.T) {
	e := setup(t)
	node := e.c.Nodes[0]
	r := &release{e: e, name: "diskprobe-exporter", ns: "dp-baseline"}
	e.namespace(t, r.ns, "baseline")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", r.describe())
		}
		r.uninstall(t)
	})
	removeAfter(t, node.Path("/var/lib/diskprobe-k8s-baseline"))
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(onNode(node)+`config:
  targets:
    - name: d
      path: /var/lib/diskprobe-k8s-baseline
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := r.helm(t, "install", r.name, chartDir, "-n", r.ns, "--set", "image.tag="+e.tag, "-f", values)
	if !strings.Contains(out, "STATUS: deployed") {
		t.Errorf("helm install does not report deployed:\n%s", out)
	}
	var events string
	testenv.WaitFor(t, time.Minute, "the DaemonSet's FailedCreate event", func() bool {
		events, _ = e.c.KubectlErr("-n", r.ns, "get", "events", "--field-selector", "reason=FailedCreate", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(events, "violates PodSecurity")
	})
	for _, want := range []string{`violates PodSecurity "baseline:latest"`, "hostPath volumes"} {
		if !strings.Contains(events, want) {
			t.Errorf("the DaemonSet's events do not say %q, as docs/kubernetes.md has it:\n%s", want, events)
		}
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal([]byte(e.c.Kubectl(t, "-n", r.ns, "get", "daemonset", r.name, "-o", "json")), &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Status.DesiredNumberScheduled != 1 || ds.Status.CurrentNumberScheduled != 0 || len(r.pods(t)) != 0 {
		t.Errorf("DaemonSet status %+v and %d pods, want 1 desired and no pod", ds.Status, len(r.pods(t)))
	}
	t.Logf("baseline: %s", lastLines(events, 1))

	// The documented fix, with this test's namespace and release.
	doc, err := os.ReadFile(filepath.Join(chartDir, "../../docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	fix := []string{
		"kubectl label --overwrite namespace diskprobe pod-security.kubernetes.io/enforce=privileged",
		"kubectl -n diskprobe rollout restart daemonset/diskprobe-exporter",
	}
	sh := e.shell(t)
	start := time.Now()
	for _, c := range fix {
		if !strings.Contains(string(doc), c) {
			t.Errorf("docs/kubernetes.md does not give the fix %q", c)
		}
		sh.run(t, strings.ReplaceAll(c, " diskprobe ", " "+r.ns+" "))
	}
	pod := r.onePod(t)
	testenv.WaitFor(t, 2*time.Minute, "the pod Ready", func() bool {
		code, err := ready(pod)
		return err == nil && code == 200
	})
	t.Logf("the documented fix: a Ready pod %v after the label and the restart", time.Since(start).Round(100*time.Millisecond))
}
