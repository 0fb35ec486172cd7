package cluster

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
)

// arrivalPort is the arrival prober's metrics port (the chart's arrival.containerPort).
const arrivalPort = "10053"

// TestStorageClassesProbedSlowNodeNamedArrivalTimedAndUninstallLeavesNoVolume installs the
// chart with storageClasses on the three nodes: two local-path classes, each on loop-backed
// filesystems of its own on every node (dp-fast and dp-slow, etcd-grade, one probe pod per
// node), a class of local block volumes (dp-block, probed read-only, not in the arrival
// prober), and a class whose provisioner does not exist (dp-missing: its one probe pod
// waits on its claim). Then:
//   - every class's probe pods are Ready, one per node, each serving samples of its class's
//     target;
//   - dp-slow's copy on one node, its writes limited in its own container's cgroup on that
//     node's dp-slow device, is named by DiskprobeStorageClassNodeSlow (pending or firing, in a
//     Prometheus 3 running the shipped rules with the contract's relabelings), and dp-fast has
//     no storage-class alert;
//   - the arrival prober times dp-fast's and dp-slow's volumes to bound, running and written,
//     and counts dp-missing's failures at bound, which DiskprobeStorageClassVolumesNotArriving
//     names;
//   - helm uninstall leaves no PVC and no PV of the release (by label and by class), and the
//     provisioner's directories empty.
func TestStorageClassesProbedSlowNodeNamedArrivalTimedAndUninstallLeavesNoVolume(t *testing.T) {
	e := setup(t)
	start := time.Now()
	lp := startLocalPath(t, e, "dp-fast", "dp-slow")
	missingClass(t, e, "dp-missing")
	bc := startBlockClass(t, e, "dp-block", 64<<20)
	// The pods the arrival prober makes carry no tolerations (they go where the class's
	// volumes can be, as a workload's), and every node here is a tainted control-plane node.
	untaintNodes(t, e)
	fixtures := time.Since(start)
	for _, n := range e.c.Nodes {
		removeAfter(t, n.Path("/var/lib/diskprobe-k8s-sc"))
	}
	apiHost, apiPort, _ := strings.Cut(strings.TrimPrefix(e.c.Server, "https://"), ":")
	// Small probe files: a class's disk is 192 MiB. Arrival every 30 s, each stage 20 s.
	fsTarget := "{fsync: {interval: 1s, ops: 5, file_size: 1MiB}, limits: {min_free: 1MiB}}"
	values := fmt.Sprintf(`config:
  targets:
    - name: d
      path: /var/lib/diskprobe-k8s-sc
      fsync: {interval: 5s, ops: 2, file_size: 1MiB}
      limits: {min_free: 1MiB}
tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
storageClasses:
  - {name: dp-fast, size: 64Mi, spread: node, replicas: 3, etcdGrade: true, target: %[1]s}
  - {name: dp-slow, size: 64Mi, spread: node, replicas: 3, etcdGrade: true, target: %[1]s}
  - {name: dp-block, size: 64Mi, volumeMode: Block, spread: node, replicas: 3, arrival: false, target: {randread: {interval: 1s, ops: 5}}}
  - {name: dp-missing, size: 16Mi, replicas: 1}
arrival:
  enabled: true
  interval: 30s
  timeout: 20s
  size: 16Mi
  env:
    - {name: KUBERNETES_SERVICE_HOST, value: %[2]q}
    - {name: KUBERNETES_SERVICE_PORT, value: %[3]q}
`, fsTarget, apiHost, apiPort)
	installStart := time.Now()
	r := e.install(t, "sc", true, values)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.c.KubectlErr("-n", r.ns, "describe", "statefulsets,pods,pvc")
			logs, _ := e.c.KubectlErr("-n", r.ns, "logs", "-l", "app.kubernetes.io/component=arrival", "--tail=40")
			t.Logf("%s\narrival's log:\n%s", lastLines(out, 150), logs)
		}
	})

	// A probe pod per node per class, Ready, with samples of its class's target.
	classPods := map[string]map[string]corev1.Pod{}
	for _, class := range []string{"dp-fast", "dp-slow", "dp-block"} {
		classPods[class] = readyClassPods(t, e, r, class)
	}
	t.Logf("fixtures %v; every class's pods Ready %v after helm install", fixtures.Round(100*time.Millisecond), time.Since(installStart).Round(100*time.Millisecond))
	for _, class := range []string{"dp-fast", "dp-slow"} {
		for _, p := range classPods[class] {
			waitSamples(t, p, "diskprobe_fdatasync_duration_seconds", class, 5)
		}
	}
	for _, p := range classPods["dp-block"] {
		waitSamples(t, p, "diskprobe_read_duration_seconds", "dp-block", 5)
	}
	// dp-missing's probe pod (the schema wants a replica at least) waits on its claim.
	if phase := e.c.Kubectl(t, "-n", r.ns, "get", "pvc", "-l", "diskprobe.io/storage-class=dp-missing,app.kubernetes.io/component=storageclass", "-o", "jsonpath={.items[*].status.phase}"); phase != "Pending" {
		t.Errorf("dp-missing's probe claim is %q, want Pending", phase)
	}

	// One node's dp-slow copy slowed: the limit in the very cgroup of its exporter.
	slow := e.c.Nodes[1]
	pod := classPods["dp-slow"][slow.Name]
	pids := throttleDeviceWrites(t, slow, pod, lp.disks["dp-slow"][slow.Name].dev, 5)
	if !exporterAmong(pids) {
		t.Fatalf("the exporter of %s is not among the processes of its container's cgroup %v", pod.Name, pids)
	}
	throttled := time.Now()

	prom := storageClassPrometheus(t, e, r.ns)
	names := nodeNames(e)
	promWait(t, prom, 3*time.Minute, "every class pod and the arrival prober scraped", func() bool {
		up, err := prom.Query(`up == 1`)
		if err != nil {
			return false
		}
		n := map[string]int{}
		for _, s := range up.Result {
			n[s.Metric["job"]+"/"+s.Metric["storage_class"]]++
		}
		return n["diskprobe-storageclass/dp-fast"] == len(names) && n["diskprobe-storageclass/dp-slow"] == len(names) &&
			n["diskprobe-storageclass/dp-block"] == len(names) && n["diskprobe-arrival/"] == 1
	})
	var p99 map[string]float64
	promWait(t, prom, 8*time.Minute, "DiskprobeStorageClassNodeSlow for dp-slow on "+slow.Name, func() bool {
		p99, _ = byInstance(prom.Prometheus, `target:diskprobe_storageclass_fdatasync_duration_seconds:quantile_rate5m{storage_class="dp-slow"}`)
		n, err := prom.SeriesCount(fmt.Sprintf(`ALERTS{alertname="DiskprobeStorageClassNodeSlow",storage_class="dp-slow",instance=%q}`, slow.Name))
		return err == nil && n == 1
	})
	state, _ := alertStates(prom, "DiskprobeStorageClassNodeSlow")
	t.Logf("DiskprobeStorageClassNodeSlow %s for dp-slow on %s %v after the limit; dp-slow's p99 by node %v",
		state, slow.Name, time.Since(throttled).Round(time.Second), p99)
	if n, err := prom.SeriesCount(`ALERTS{alertname="DiskprobeStorageClassNodeSlow",storage_class="dp-slow"}`); err != nil || n != 1 {
		t.Errorf("DiskprobeStorageClassNodeSlow names %d dp-slow nodes (%v), want %s alone", n, err, slow.Name)
	}
	fast, _ := prom.Query(`ALERTS{alertname=~"DiskprobeStorageClass.*",storage_class="dp-fast"}`)
	for _, s := range fast.Result {
		// The etcd target's alert pending on this loaded machine is not a verdict (it
		// fires only after 15 minutes); a slow node or anything firing is.
		if s.Metric["alertname"] == "DiskprobeStorageClassNodeSlow" || s.Metric["alertstate"] == "firing" {
			t.Errorf("dp-fast, not throttled, has %s %s (instance %q)", s.Metric["alertname"], s.Metric["alertstate"], s.Metric["instance"])
		} else {
			t.Logf("dp-fast: %s %s (not judged)", s.Metric["alertname"], s.Metric["alertstate"])
		}
	}

	// Arrival: dp-fast's and dp-slow's volumes timed to each stage; dp-missing's never bound.
	arrivalPod := onlyPod(t, e, r.ns, "app.kubernetes.io/component=arrival,app.kubernetes.io/instance="+r.name)
	arrival := &framework.Exporter{Addr: arrivalPod.Status.PodIP + ":" + arrivalPort}
	framework.WaitMetric(t, arrival, 3*time.Minute, "arrival times of dp-fast and dp-slow and a failure of dp-missing", func(f map[string]*dto.MetricFamily) bool {
		for _, class := range []string{"dp-fast", "dp-slow"} {
			for _, stage := range []string{"bound", "running", "written"} {
				if v, _ := framework.Value(f, "diskprobe_storageclass_arrival_seconds", map[string]string{"storage_class": class, "stage": stage}); v < 1 {
					return false
				}
			}
		}
		v, _ := framework.Value(f, "diskprobe_storageclass_arrival_failures_total", map[string]string{"storage_class": "dp-missing", "stage": "bound"})
		return v >= 1
	})
	promWait(t, prom, 3*time.Minute, "DiskprobeStorageClassVolumesNotArriving for dp-missing", func() bool {
		n, err := prom.SeriesCount(`ALERTS{alertname="DiskprobeStorageClassVolumesNotArriving",storage_class="dp-missing"}`)
		return err == nil && n >= 1
	})
	for _, class := range []string{"dp-fast", "dp-slow"} {
		if n, err := prom.SeriesCount(fmt.Sprintf(`ALERTS{alertname="DiskprobeStorageClassVolumesNotArriving",storage_class=%q}`, class)); err != nil || n != 0 {
			t.Errorf("DiskprobeStorageClassVolumesNotArriving names %s, whose volumes arrive (%d series, %v)", class, n, err)
		}
	}
	if f, _, err := arrival.Scrape(5 * time.Second); err == nil {
		for _, class := range []string{"dp-fast", "dp-slow"} {
			t.Logf("%s: arrival attempts %v, failures by stage %v", class, value(f, "diskprobe_storageclass_arrival_attempts_total", class, ""), failures(f, class))
		}
		t.Logf("dp-missing: failures by stage %v", failures(f, "dp-missing"))
	}

	// helm uninstall: no PVC, no PV of the release's classes, the directories empty.
	uninstallStart := time.Now()
	r.uninstall(t)
	var left []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if left = releaseVolumes(t, e, r, lp); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("left 2m after helm uninstall: %v", left)
	}
	if left := lp.leftInDirs(); len(left) > 0 {
		t.Errorf("left in the classes' directories after helm uninstall: %v", left)
	}
	// The block class's volumes are pre-made (Retain): released, their devices unmapped.
	testenv.WaitFor(t, time.Minute, "the kubelet's loop devices over the block volumes gone", func() bool { return len(loopsOver(bc.devs)) == 0 })
	t.Logf("helm uninstall: volumes gone in %v; test %v", time.Since(uninstallStart).Round(100*time.Millisecond), time.Since(start).Round(time.Second))
}

// untaintNodes removes the control-plane taint from every node until the test ends.
func untaintNodes(t *testing.T, e *env) {
	t.Helper()
	for _, n := range e.c.Nodes {
		e.c.Kubectl(t, "taint", "node", n.Name, "node-role.kubernetes.io/control-plane:NoSchedule-")
		t.Cleanup(func() {
			if out, err := e.c.KubectlErr("taint", "node", n.Name, "node-role.kubernetes.io/control-plane=:NoSchedule", "--overwrite"); err != nil {
				t.Errorf("tainting %s again: %v\n%s", n.Name, err, out)
			}
		})
	}
}

// readyClassPods waits for the class's probe pods of the release, one Ready on every node, and
// returns them by node.
func readyClassPods(t *testing.T, e *env, r *release, class string) map[string]corev1.Pod {
	t.Helper()
	byNode := map[string]corev1.Pod{}
	testenv.WaitFor(t, 4*time.Minute, class+"'s probe pods Ready on every node", func() bool {
		var list corev1.PodList
		out, err := e.c.KubectlErr("-n", r.ns, "get", "pods", "-l", "app.kubernetes.io/component=storageclass,diskprobe.io/storage-class="+class, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &list) != nil {
			return false
		}
		byNode = map[string]corev1.Pod{}
		for _, p := range list.Items {
			// An exporter that refuses its volume says why at once: no use waiting.
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount >= 2 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
					logs, _ := e.c.KubectlErr("-n", r.ns, "logs", p.Name, "--previous", "--tail=5")
					t.Fatalf("%s's probe pod %s on %s crash-loops; its last log lines:\n%s", class, p.Name, p.Spec.NodeName, logs)
				}
			}
			if podReady(p) && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				byNode[p.Spec.NodeName] = p
			}
		}
		return len(list.Items) == len(e.c.Nodes) && len(byNode) == len(e.c.Nodes)
	})
	return byNode
}

// onlyPod waits for the one running pod with an IP that selector selects.
func onlyPod(t *testing.T, e *env, ns, selector string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	testenv.WaitFor(t, 3*time.Minute, "a running pod of "+selector, func() bool {
		var list corev1.PodList
		out, err := e.c.KubectlErr("-n", ns, "get", "pods", "-l", selector, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 1 {
			return false
		}
		pod = list.Items[0]
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	})
	return pod
}

// exporterAmong reports whether one of pids is the exporter (its command line's first word).
func exporterAmong(pids []string) bool {
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(strings.Split(string(cmdline), "\x00")[0], "diskprobe_exporter") {
			return true
		}
	}
	return false
}

// storageClassPrometheus runs Prometheus 3 on the host with the shipped rules and the
// contract's two jobs over the release's namespace (kubernetes_sd, pods, the admin's
// certificate): the class pods as job diskprobe-storageclass, instance their node, with
// storage_class and etcd_grade from their labels; the arrival prober as job
// diskprobe-arrival, instance its pod. Scrapes and rules every second.
func storageClassPrometheus(t *testing.T, e *env, ns string) *promProc {
	t.Helper()
	sd := []map[string]any{{
		"role":       "pod",
		"api_server": e.c.Server,
		"namespaces": map[string]any{"names": []string{ns}},
		"tls_config": map[string]any{"ca_file": e.c.CAFile, "cert_file": e.c.CertFile, "key_file": e.c.KeyFile},
	}}
	keep := func(component string) []map[string]any {
		return []map[string]any{
			{"source_labels": []string{"__meta_kubernetes_pod_label_app_kubernetes_io_component"}, "regex": component, "action": "keep"},
			{"source_labels": []string{"__meta_kubernetes_pod_container_port_name"}, "regex": "metrics", "action": "keep"},
		}
	}
	classRelabel := append(keep("storageclass"),
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_node_name"}, "target_label": "instance"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_label_diskprobe_io_storage_class"}, "target_label": "storage_class"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_label_diskprobe_io_etcd_grade"}, "target_label": "etcd_grade"},
	)
	arrivalRelabel := append(keep("arrival"),
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "instance"},
	)
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files": []string{testenv.RepoPath("alerts", "diskprobe.rules.yml")},
		"scrape_configs": []map[string]any{
			{"job_name": "diskprobe-storageclass", "kubernetes_sd_configs": sd, "relabel_configs": classRelabel},
			{"job_name": "diskprobe-arrival", "kubernetes_sd_configs": sd, "relabel_configs": arrivalRelabel},
		},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := framework.FreePort(t)
	proc := testenv.StartProcess(t, filepath.Join(framework.ToolDir(t, "prometheus"), "prometheus"),
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	// Ended with the test binary too (an interrupt runs k8senv's cleanups, not t's).
	k8senv.Cleanup(t, func() { _ = proc.Cmd.Process.Kill() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus configuration:\n%s\nprometheus log (tail):\n%s", data, lastLines(proc.Output(), 30))
		}
	})
	return &promProc{Prometheus: &framework.Prometheus{Addr: addr}, proc: proc}
}

// promProc is a Prometheus the test runs, and its process.
type promProc struct {
	*framework.Prometheus
	proc *testenv.Process
}

// promWait polls cond until it holds, failing early if Prometheus exits.
func promWait(t *testing.T, p *promProc, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, what, func() bool {
		if p.proc.WaitExit(time.Millisecond) {
			t.Fatalf("prometheus exited:\n%s", lastLines(p.proc.Output(), 20))
		}
		return cond()
	})
}

// alertStates is each state an alerting rule's alerts are in, joined ("pending", "firing").
func alertStates(p *promProc, alert string) (string, error) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name   string `json:"name"`
				Alerts []struct {
					State string `json:"state"`
				} `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.API("/api/v1/rules", url.Values{"type": {"alert"}}, &rules); err != nil {
		return "", err
	}
	var states []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Name == alert {
				for _, a := range r.Alerts {
					states = append(states, a.State)
				}
			}
		}
	}
	sort.Strings(states)
	return strings.Join(states, ","), nil
}

// value is a class's sample of an arrival metric (stage "" for those without one).
func value(f map[string]*dto.MetricFamily, metric, class, stage string) float64 {
	want := map[string]string{"storage_class": class}
	if stage != "" {
		want["stage"] = stage
	}
	v, _ := framework.Value(f, metric, want)
	return v
}

// failures are a class's arrival failures by stage, those above 0.
func failures(f map[string]*dto.MetricFamily, class string) map[string]float64 {
	out := map[string]float64{}
	for _, stage := range []string{"create", "bound", "running", "written", "deleted"} {
		if v := value(f, "diskprobe_storageclass_arrival_failures_total", class, stage); v > 0 {
			out[stage] = v
		}
	}
	return out
}

// releaseVolumes lists the PVCs and PVs of the release left: PVCs of its namespace labelled
// with the release or of one of the classes, and PVs of the provisioner's classes or the
// missing one, or bound to a claim in its namespace (the block class's pre-made volumes stay,
// Released, and are not counted once their claim is gone).
func releaseVolumes(t *testing.T, e *env, r *release, lp *localPath) []string {
	t.Helper()
	var left []string
	var pvcs corev1.PersistentVolumeClaimList
	if err := json.Unmarshal([]byte(e.c.Kubectl(t, "-n", r.ns, "get", "pvc", "-o", "json")), &pvcs); err != nil {
		t.Fatal(err)
	}
	for _, c := range pvcs.Items {
		left = append(left, "pvc/"+c.Name)
	}
	var pvs corev1.PersistentVolumeList
	if err := json.Unmarshal([]byte(e.c.Kubectl(t, "get", "pv", "-o", "json")), &pvs); err != nil {
		t.Fatal(err)
	}
	classes := map[string]bool{"dp-missing": true}
	for _, c := range lp.classes {
		classes[c] = true
	}
	for _, v := range pvs.Items {
		claimed := v.Spec.ClaimRef != nil && v.Spec.ClaimRef.Namespace == r.ns && v.Status.Phase == corev1.VolumeBound
		if classes[v.Spec.StorageClassName] || claimed {
			left = append(left, fmt.Sprintf("pv/%s (%s, %s)", v.Name, v.Spec.StorageClassName, v.Status.Phase))
		}
	}
	return left
}
