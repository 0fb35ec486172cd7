package cluster

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/ociimage"
)

// prometheusImage is Prometheus 3 (scripts/tools.sh's static binary) as an image, for a
// Prometheus that runs in the cluster.
const prometheusImage = "localhost/diskprobe-k8s-prometheus:3"

// TestPlainPrometheusScrapesDefaultDenyNamespaceOrAbsentFiresForever runs, in the cluster,
// Prometheus 3 without the operator, configured with docs/kubernetes.md's scrape job as it is
// written and the chart's rules from its rulesConfigMap, mounted from the Prometheus's
// namespace. The chart is in a namespace whose default-deny NetworkPolicy kube-router
// enforces on every node, with the chart's own NetworkPolicy. That Prometheus (labelled
// app.kubernetes.io/name=prometheus) must scrape every node's pod under the job the rules
// select, with instance the node's name, and DiskprobeExporterAbsent must be evaluated and
// quiet; a second, unlabelled Prometheus with the same configuration must get no answer from
// any pod (the policy is enforced, not merely accepted).
func TestPlainPrometheusScrapesDefaultDenyNamespaceOrAbsentFiresForever(t *testing.T) {
	e := setup(t)
	e.c.EnforceNetworkPolicies(t, filepath.Join(framework.ToolDir(t, "kube-router"), "kube-router"))
	job := docsScrapeJob(t)
	ns := job.namespace
	promNode := e.c.Nodes[1]
	importPrometheus(t, promNode)

	// The Prometheus's namespace first: the chart puts its rules there.
	e.namespace(t, "monitoring", "privileged")
	for _, n := range e.c.Nodes {
		removeAfter(t, n.Path("/var/lib/diskprobe-k8s-plain"))
	}
	r := &release{e: e, name: "diskprobe-exporter", ns: ns}
	e.namespace(t, ns, "privileged")
	apply(t, e, ns, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: default-deny}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n")
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`config:
  targets:
    - name: d
      path: /var/lib/diskprobe-k8s-plain
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
networkPolicy: {enabled: true}
rulesConfigMap: {enabled: true, namespace: monitoring}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", r.describe())
		}
		r.uninstall(t)
	})
	r.notes = r.helm(t, "install", r.name, chartDir, "-n", ns, "--set", "image.tag="+e.tag, "-f", values, "--wait", "--timeout", "3m")
	if !strings.Contains(r.notes, "NetworkPolicy "+r.name) || !strings.Contains(r.notes, "Skipped: ServiceMonitor, PrometheusRule") {
		t.Errorf("helm install's NOTES do not name the NetworkPolicy and the objects skipped without the operator:\n%s", r.notes)
	}
	r.runningPods(t, len(e.c.Nodes))
	rulesCM := r.name + "-rules"
	e.c.Kubectl(t, "-n", "monitoring", "get", "configmap", rulesCM)

	apply(t, e, "", prometheusRBAC)
	t.Cleanup(func() {
		_, _ = e.c.KubectlErr("delete", "clusterrolebinding,clusterrole", "diskprobe-test-prometheus", "--ignore-not-found")
	})
	apply(t, e, "monitoring", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: prometheus-config}\ndata:\n  prometheus.yml: |\n"+
		indent(inClusterConfig(t, e, job.yaml), "    "))
	for name, label := range map[string]string{"prometheus": "prometheus", "unlabelled": "not-prometheus"} {
		apply(t, e, "monitoring", prometheusPod(name, label, promNode.Name, rulesCM))
	}
	var labelled, unlabelled *framework.Prometheus
	testenv.WaitFor(t, 3*time.Minute, "both Prometheus pods running", func() bool {
		ips := map[string]string{}
		for _, name := range []string{"prometheus", "unlabelled"} {
			ip, err := e.c.KubectlErr("-n", "monitoring", "get", "pod", name, "-o", "jsonpath={.status.podIP}")
			if err != nil || ip == "" {
				return false
			}
			ips[name] = ip
		}
		labelled = &framework.Prometheus{Addr: ips["prometheus"] + ":9090"}
		unlabelled = &framework.Prometheus{Addr: ips["unlabelled"] + ":9090"}
		_, err1 := labelled.Query("up")
		_, err2 := unlabelled.Query("up")
		return err1 == nil && err2 == nil
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"prometheus", "unlabelled"} {
				logs, _ := e.c.KubectlErr("-n", "monitoring", "logs", name, "--tail=30")
				t.Logf("%s's log:\n%s", name, logs)
			}
		}
	})

	names := nodeNames(e)
	testenv.WaitFor(t, 3*time.Minute, "the labelled Prometheus scraping every node's pod", func() bool {
		up, err := byInstance(labelled, `up{job="diskprobe-exporter"} == 1`)
		return err == nil && sameKeys(up, names)
	})
	testenv.WaitFor(t, 2*time.Minute, "the unlabelled Prometheus failing every scrape", func() bool {
		up, err := byInstance(unlabelled, `up{job="diskprobe-exporter"} == 0`)
		return err == nil && sameKeys(up, names)
	})
	if n, err := unlabelled.SeriesCount(`up{job="diskprobe-exporter"} == 1`); err != nil || n != 0 {
		t.Errorf("a Prometheus the chart's NetworkPolicy does not name scraped %d pods in a default-deny namespace (%v)", n, err)
	}

	// DiskprobeExporterAbsent: evaluated, healthy and quiet.
	testenv.WaitFor(t, time.Minute, "DiskprobeExporterAbsent evaluated", func() bool {
		state, health, err := alertState(labelled, "DiskprobeExporterAbsent")
		return err == nil && health == "ok" && state != ""
	})
	// Long enough for a rule evaluated every second to have fired, were it going to.
	time.Sleep(5 * time.Second)
	if state, health, err := alertState(labelled, "DiskprobeExporterAbsent"); err != nil || state != "inactive" || health != "ok" {
		t.Errorf("DiskprobeExporterAbsent is %q (health %q, %v), want inactive", state, health, err)
	}
	if n, err := labelled.SeriesCount(`ALERTS{alertname="DiskprobeExporterAbsent"}`); err != nil || n != 0 {
		t.Errorf("DiskprobeExporterAbsent has %d ALERTS series (%v)", n, err)
	}
	r.uninstall(t)
	e.c.Kubectl(t, "-n", ns, "delete", "networkpolicy", "default-deny")
	r.nothingLeft(t)
}

// scrapeJob is the scrape job docs/kubernetes.md gives for a Prometheus without the operator.
type scrapeJob struct {
	yaml      string // the list item, as written
	namespace string // the namespace its discovery looks in
}

func docsScrapeJob(t *testing.T) scrapeJob {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "../../docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "## Prometheus without the operator")
	if i < 0 {
		t.Fatal(`docs/kubernetes.md has no section "Prometheus without the operator"`)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(doc[i:])
	if m == nil {
		t.Fatal(`docs/kubernetes.md's "Prometheus without the operator" gives no YAML`)
	}
	var jobs []struct {
		JobName string `yaml:"job_name"`
		SD      []struct {
			Namespaces struct {
				Names []string `yaml:"names"`
			} `yaml:"namespaces"`
		} `yaml:"kubernetes_sd_configs"`
	}
	if err := yaml.Unmarshal([]byte(m[1]), &jobs); err != nil || len(jobs) != 1 || len(jobs[0].SD) != 1 || len(jobs[0].SD[0].Namespaces.Names) != 1 {
		t.Fatalf("docs/kubernetes.md's scrape configuration is not one job discovering one namespace (%v):\n%s", err, m[1])
	}
	if jobs[0].JobName != "diskprobe-exporter" {
		t.Errorf("the documented job is %q; the NOTES and docs query up{job=\"diskprobe-exporter\"}", jobs[0].JobName)
	}
	return scrapeJob{yaml: m[1], namespace: jobs[0].SD[0].Namespaces.Names[0]}
}

// inClusterConfig is a Prometheus configuration with the documented job and the chart's rule
// file, scraping and evaluating every second. The one change to the job: its discovery is
// pointed at the API server's address (this cluster has no kube-proxy to route the
// kubernetes Service's ClusterIP), with the pod's ServiceAccount, as Prometheus would use it
// by default.
func inClusterConfig(t *testing.T, e *env, job string) string {
	t.Helper()
	var jobs []map[string]any
	if err := yaml.Unmarshal([]byte(job), &jobs); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		sds, _ := j["kubernetes_sd_configs"].([]any)
		for _, s := range sds {
			sd := s.(map[string]any)
			sd["api_server"] = e.c.Server
			sd["tls_config"] = map[string]any{"ca_file": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}
			sd["authorization"] = map[string]any{"credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
		}
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{"/etc/prometheus/rules/*.yml"},
		"scrape_configs": jobs,
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

const prometheusRBAC = `apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: monitoring}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: diskprobe-test-prometheus}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: diskprobe-test-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: diskprobe-test-prometheus}
subjects:
  - {kind: ServiceAccount, name: prometheus, namespace: monitoring}
`

// prometheusPod is a Prometheus pod on node, labelled app.kubernetes.io/name=label, with the
// configuration ConfigMap and the chart's rules ConfigMap mounted.
func prometheusPod(name, label, node, rulesCM string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {app.kubernetes.io/name: %s}
spec:
  nodeName: %s
  serviceAccountName: prometheus
  tolerations: [{operator: Exists}]
  securityContext: {runAsUser: 65534, runAsGroup: 65534, fsGroup: 65534}
  containers:
    - name: prometheus
      image: %s
      imagePullPolicy: Never
      args: [--config.file=/etc/prometheus/config/prometheus.yml, --storage.tsdb.path=/prometheus, --web.listen-address=:9090]
      volumeMounts:
        - {name: config, mountPath: /etc/prometheus/config}
        - {name: rules, mountPath: /etc/prometheus/rules}
        - {name: data, mountPath: /prometheus}
  volumes:
    - {name: config, configMap: {name: prometheus-config}}
    - {name: rules, configMap: {name: %s}}
    - {name: data, emptyDir: {}}
`, name, label, node, prometheusImage, rulesCM)
}

// importPrometheus packs scripts/tools.sh's Prometheus 3 as an image and imports it into the
// node's containerd.
func importPrometheus(t *testing.T, n *k8senv.Node) {
	t.Helper()
	bin := filepath.Join(framework.ToolDir(t, "prometheus"), "prometheus")
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := &ociimage.Spec{Copies: []ociimage.Copy{{Src: "prometheus", Dst: "/bin/prometheus"}}, Entrypoint: []string{"/bin/prometheus"}, User: "65534"}
	img, err := spec.Image(dir)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "prometheus.oci.tar")
	if err := ociimage.WriteArchive(archive, prometheusImage, img); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImage(archive, prometheusImage); err != nil {
		t.Fatal(err)
	}
}

// alertState is an alerting rule's state (inactive, pending, firing) and health as
// Prometheus's rules API reports them.
func alertState(p *framework.Prometheus, alert string) (state, health string, err error) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name   string `json:"name"`
				State  string `json:"state"`
				Health string `json:"health"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.API("/api/v1/rules", url.Values{"type": {"alert"}}, &rules); err != nil {
		return "", "", err
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Name == alert {
				return r.State, r.Health, nil
			}
		}
	}
	return "", "", fmt.Errorf("no alerting rule %s", alert)
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}
