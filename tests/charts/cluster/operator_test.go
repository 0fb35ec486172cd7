package cluster

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestOperatorIgnoresServiceMonitorOrRule installs prometheus-operator's CRDs, runs the
// operator (pinned, from scripts/tools.sh) on the host against the test apiserver, and a
// Prometheus resource with replicas 0 that selects everything: the operator must turn the
// chart's ServiceMonitor into a scrape job (the Secret it writes) and its PrometheusRule into
// a rule file (the ConfigMap). Prometheus 3 then runs that configuration on the host (Debian's
// 2.42 has no Kubernetes service discovery) —
// its kubernetes_sd_configs given the apiserver's address and the admin's client certificate
// (in a cluster it would use its ServiceAccount), intervals shortened to 1 s — scrapes the
// pod at its pod IP (the Service's endpoints) and must record
// target:diskprobe_fdatasync_duration_seconds:quantile_rate5m for the node.
func TestOperatorIgnoresServiceMonitorOrRule(t *testing.T) {
	e := setup(t)
	// Prometheus 3 (scripts/tools.sh): Debian's 2.42 is built without Kubernetes service
	// discovery ("field kubernetes_sd_configs not found").
	promBin := filepath.Join(testenv.ToolDir(t, "prometheus"), "prometheus")
	opBin := filepath.Join(testenv.ToolDir(t, "prometheus-operator"), "prometheus-operator")
	crds := testenv.ToolDir(t, "prometheus-operator-crds")
	c := e.c
	c.Kubectl(t, "apply", "--server-side", "-f", crds)
	t.Cleanup(func() { _, _ = c.KubectlErr("delete", "-f", crds, "--wait=true", "--timeout=2m") })
	// helm decides from the API server's discovery (.Capabilities), which kubectl and helm
	// cache on disk: wait until a fresh discovery (api-resources refreshes the cache) lists
	// both kinds, as a user installing the CRDs just before the chart would have to.
	testenv.WaitFor(t, time.Minute, "the CRDs in discovery", func() bool {
		out, err := c.KubectlErr("api-resources", "--api-group=monitoring.coreos.com", "-o", "name")
		return err == nil && strings.Contains(out, "servicemonitors") && strings.Contains(out, "prometheusrules")
	})

	ns := "dp-operator"
	r := e.install(t, "operator", false, tolerateControlPlane, `config:
  targets:
    - name: d
      path: /var/lib/diskprobe-k8s-operator-test
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
`)
	removeAfter(t, "/var/lib/diskprobe-k8s-operator-test")
	if r.ns != ns {
		t.Fatalf("namespace %s", r.ns)
	}
	if out := c.Kubectl(t, "-n", ns, "get", "servicemonitors,prometheusrules", "-o", "name"); !strings.Contains(out, "servicemonitor") || !strings.Contains(out, "prometheusrule") {
		t.Fatalf("the chart made no ServiceMonitor and PrometheusRule on a cluster serving their API:\n%s", out)
	}
	pod := r.onePod(t)

	op := testenv.StartProcess(t, opBin, "--apiserver="+c.Server, "--ca-file="+c.CAFile,
		"--cert-file="+c.CertFile, "--key-file="+c.KeyFile, "--web.listen-address=127.0.0.1:"+port(testenv.FreePort(t)),
		"--namespaces="+ns, "--log-level=info")
	prom := `apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: test, namespace: ` + ns + `}
spec:
  replicas: 0
  version: v3.16.0
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
`
	apply(t, e, prom)
	// Deleted while the operator runs (cleanups run last first), so its finalizer is
	// honoured and the namespace and CRDs can go.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus-operator log (tail):\n%s", lastLines(op.Output(), 40))
		}
		_, _ = c.KubectlErr("-n", ns, "delete", "prometheus", "test", "--wait=true", "--timeout=1m")
	})
	var cfg, rules string
	testenv.WaitFor(t, 2*time.Minute, "the operator's scrape configuration and rule files", func() bool {
		out, err := c.KubectlErr("-n", ns, "get", "secret", "prometheus-test", "-o", "jsonpath={.data.prometheus\\.yaml\\.gz}")
		if err != nil || out == "" {
			return false
		}
		cfg = gunzipBase64(t, out)
		rules, err = c.KubectlErr("-n", ns, "get", "configmap", "prometheus-test-rulefiles-0", "-o", "json")
		return err == nil && strings.Contains(cfg, "serviceMonitor/"+ns+"/")
	})
	if !strings.Contains(rules, "target:diskprobe_fdatasync_duration_seconds:quantile_rate5m") {
		t.Fatalf("the rule files hold no diskprobe recording rules")
	}

	// The rule files, as the operator's ConfigMap holds them, where the configuration names them.
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(rules), &cm); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ruleDir := filepath.Join(dir, "rules")
	_ = os.Mkdir(ruleDir, 0o755)
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(ruleDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(hostConfig(t, cfg, e, filepath.Join(ruleDir, "*.yaml"))), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreePort(t)
	p := testenv.StartProcess(t, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	t.Cleanup(func() {
		if t.Failed() {
			cfgText, _ := os.ReadFile(cfgPath)
			t.Logf("prometheus configuration:\n%s\nprometheus log (tail):\n%s", cfgText, lastLines(p.Output(), 40))
		}
	})
	pr := &testenv.Prometheus{Addr: addr}
	expr := fmt.Sprintf(`target:diskprobe_fdatasync_duration_seconds:quantile_rate5m{instance=%q}`, e.c.Node)
	testenv.WaitFor(t, 3*time.Minute, "a recorded quantile for the node", func() bool {
		if p.WaitExit(time.Millisecond) {
			t.Fatalf("prometheus exited:\n%s", lastLines(p.Output(), 20))
		}
		n, err := pr.SeriesCount(expr)
		return err == nil && n > 0
	})
	up, err := pr.Query(`up{job=~".*diskprobe.*"}`)
	if err != nil || len(up.Result) == 0 {
		t.Errorf("no up series for the diskprobe job: %v", err)
	} else {
		t.Logf("scraped %s at %s", up.Result[0].Metric["job"], pod.Status.PodIP)
	}
	// With the operator's kinds served, uninstall must remove the ServiceMonitor and
	// PrometheusRule too. The test's Prometheus goes first (the operator, still running,
	// lets the garbage collector remove what it made for it).
	c.Kubectl(t, "-n", ns, "delete", "prometheus", "test", "--wait=true", "--timeout=1m")
	r.uninstallLeavesNothing(t)
}

func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

func apply(t *testing.T, e *env, manifest string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	e.c.Kubectl(t, "apply", "-f", p)
}

func gunzipBase64(t *testing.T, b64 string) string {
	t.Helper()
	var raw bytes.Buffer
	dec := base64Decoder(strings.NewReader(b64))
	if _, err := io.Copy(&raw, dec); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// hostConfig adapts the operator's configuration to a Prometheus on the host: service
// discovery against the test apiserver with the admin's certificate, the rule files where
// the test wrote them, 1 s intervals, and the sidecar's substitutions.
func hostConfig(t *testing.T, cfg string, e *env, ruleGlob string) string {
	t.Helper()
	// What the operator's config-reloader sidecar substitutes in the pod: the shard this
	// server keeps (one shard: 0) and the pod's name.
	cfg = strings.NewReplacer("$(SHARD)", "0", "$(POD_NAME)", "prometheus-test-0").Replace(cfg)
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatal(err)
	}
	global, _ := doc["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
	}
	global["scrape_interval"], global["evaluation_interval"], global["scrape_timeout"] = "1s", "1s", "1s"
	doc["global"] = global
	doc["rule_files"] = []any{ruleGlob}
	delete(doc, "alerting")
	jobs, _ := doc["scrape_configs"].([]any)
	for _, j := range jobs {
		job := j.(map[string]any)
		job["scrape_interval"], job["scrape_timeout"] = "1s", "1s"
		sds, _ := job["kubernetes_sd_configs"].([]any)
		for _, s := range sds {
			sd := s.(map[string]any)
			sd["api_server"] = e.c.Server
			sd["tls_config"] = map[string]any{"ca_file": e.c.CAFile, "cert_file": e.c.CertFile, "key_file": e.c.KeyFile}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func base64Decoder(r io.Reader) io.Reader { return base64.NewDecoder(base64.StdEncoding, r) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
