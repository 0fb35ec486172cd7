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
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// kpsRelease is the Helm release name kube-prometheus-stack is installed as in its own
// instructions, which its Prometheus selects ServiceMonitors and PrometheusRules by.
const kpsRelease = "kube-prometheus-stack"

// stack is prometheus-operator configured as kube-prometheus-stack configures it, and a
// Prometheus 3 on the host running the configuration the operator generates.
type stack struct {
	e    *env
	op   *testenv.Process
	prom *framework.Prometheus
	proc *testenv.Process
	dir  string
}

// kubePrometheusStack installs prometheus-operator's CRDs and runs the operator (pinned, from
// scripts/tools.sh) on the host against the test apiserver, watching every namespace, with the
// Prometheus resource kube-prometheus-stack makes: in namespace monitoring, its ServiceMonitor,
// PodMonitor and rule selectors on the label release=kube-prometheus-stack, any namespace.
// replicas 0: the pod would need an image; the test runs what the operator generates on the
// host instead (startPrometheus).
func (e *env) kubePrometheusStack(t *testing.T) *stack {
	t.Helper()
	c := e.c
	opBin := filepath.Join(framework.ToolDir(t, "prometheus-operator"), "prometheus-operator")
	crds := framework.ToolDir(t, "prometheus-operator-crds")
	c.Kubectl(t, "apply", "--server-side", "-f", crds)
	t.Cleanup(func() { _, _ = c.KubectlErr("delete", "-f", crds, "--wait=true", "--timeout=2m") })
	// helm decides from the API server's discovery (.Capabilities), which kubectl and helm
	// cache on disk: wait until a fresh discovery (api-resources refreshes the cache) lists
	// both kinds, as a user installing the CRDs just before the chart would have to.
	testenv.WaitFor(t, time.Minute, "the CRDs in discovery", func() bool {
		out, err := c.KubectlErr("api-resources", "--api-group=monitoring.coreos.com", "-o", "name")
		return err == nil && strings.Contains(out, "servicemonitors") && strings.Contains(out, "prometheusrules")
	})
	e.namespace(t, "monitoring", "privileged")
	s := &stack{e: e}
	s.op = testenv.StartProcess(t, opBin, "--apiserver="+c.Server, "--ca-file="+c.CAFile,
		"--cert-file="+c.CertFile, "--key-file="+c.KeyFile, "--web.listen-address=127.0.0.1:"+port(framework.FreePort(t)),
		"--log-level=info")
	apply(t, e, "", `apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata:
  name: `+kpsRelease+`-prometheus
  namespace: monitoring
  labels: {release: `+kpsRelease+`}
spec:
  replicas: 0
  version: v3.16.0
  serviceMonitorSelector: {matchLabels: {release: `+kpsRelease+`}}
  serviceMonitorNamespaceSelector: {}
  podMonitorSelector: {matchLabels: {release: `+kpsRelease+`}}
  podMonitorNamespaceSelector: {}
  ruleSelector: {matchLabels: {release: `+kpsRelease+`}}
  ruleNamespaceSelector: {}
`)
	// Deleted while the operator runs (cleanups run last first), so its finalizer is
	// honoured and the namespace and CRDs can go.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus-operator log (tail):\n%s", lastLines(s.op.Output(), 40))
		}
		_, _ = c.KubectlErr("-n", "monitoring", "delete", "prometheus", kpsRelease+"-prometheus", "--wait=true", "--timeout=1m")
	})
	return s
}

// generated waits until the operator's configuration for the Prometheus holds each of jobs
// (e.g. "serviceMonitor/<namespace>/") and its rule files a diskprobe recording rule, and
// returns both.
func (s *stack) generated(t *testing.T, jobs ...string) (cfg string, rules map[string]string) {
	t.Helper()
	c := s.e.c
	secret := "prometheus-" + kpsRelease + "-prometheus"
	testenv.WaitFor(t, 2*time.Minute, "the operator's scrape configuration and rule files", func() bool {
		out, err := c.KubectlErr("-n", "monitoring", "get", "secret", secret, "-o", "jsonpath={.data.prometheus\\.yaml\\.gz}")
		if err != nil || out == "" {
			return false
		}
		cfg = gunzipBase64(t, out)
		raw, err := c.KubectlErr("-n", "monitoring", "get", "configmap", secret+"-rulefiles-0", "-o", "json")
		if err != nil {
			return false
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal([]byte(raw), &cm); err != nil {
			t.Fatal(err)
		}
		rules = cm.Data
		all := ""
		for _, r := range rules {
			all += r
		}
		for _, j := range jobs {
			if !strings.Contains(cfg, j) {
				return false
			}
		}
		return strings.Contains(all, "target:diskprobe_fdatasync_duration_seconds:quantile_rate5m")
	})
	return cfg, rules
}

// startPrometheus runs Prometheus 3 (scripts/tools.sh; Debian's 2.42 is built without
// Kubernetes service discovery) on the host with the operator's configuration and rule
// files: its kubernetes_sd_configs given the apiserver's address and the admin's client
// certificate (in a cluster it would use its ServiceAccount), intervals shortened to 1 s, and
// the TLS assets the operator copies from Secrets (the pod's /etc/prometheus/certs) in a
// directory of its own.
func (s *stack) startPrometheus(t *testing.T, cfg string, rules map[string]string) *framework.Prometheus {
	t.Helper()
	promBin := filepath.Join(framework.ToolDir(t, "prometheus"), "prometheus")
	s.dir = t.TempDir()
	certs := filepath.Join(s.dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	if raw, err := s.e.c.KubectlErr("-n", "monitoring", "get", "secret", "prometheus-"+kpsRelease+"-prometheus-tls-assets-0", "-o", "json"); err == nil {
		var secret struct {
			Data map[string][]byte `json:"data"`
		}
		if err := json.Unmarshal([]byte(raw), &secret); err != nil {
			t.Fatal(err)
		}
		for name, data := range secret.Data {
			if err := os.WriteFile(filepath.Join(certs, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg = strings.ReplaceAll(cfg, "/etc/prometheus/certs/", certs+"/")
	ruleDir := filepath.Join(s.dir, "rules")
	if err := os.Mkdir(ruleDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range rules {
		if err := os.WriteFile(filepath.Join(ruleDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(s.dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(hostConfig(t, cfg, s.e, filepath.Join(ruleDir, "*.yaml"))), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := framework.FreePort(t)
	s.proc = testenv.StartProcess(t, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(s.dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	t.Cleanup(func() {
		if t.Failed() {
			cfgText, _ := os.ReadFile(cfgPath)
			t.Logf("prometheus configuration:\n%s\nprometheus log (tail):\n%s", cfgText, lastLines(s.proc.Output(), 40))
		}
	})
	s.prom = &framework.Prometheus{Addr: addr}
	return s.prom
}

// wait polls cond until it holds, failing t early if Prometheus exits.
func (s *stack) wait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, what, func() bool {
		if s.proc.WaitExit(time.Millisecond) {
			t.Fatalf("prometheus exited:\n%s", lastLines(s.proc.Output(), 20))
		}
		return cond()
	})
}

// byInstance runs an instant query and returns each series' value by its instance label.
func byInstance(p *framework.Prometheus, expr string) (map[string]float64, error) {
	r, err := p.Query(expr)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range r.Result {
		var v float64
		str, _ := s.Value[1].(string)
		if _, err := fmt.Sscan(str, &v); err != nil {
			return nil, err
		}
		out[s.Metric["instance"]] = v
	}
	return out, nil
}

func gunzipBase64(t *testing.T, b64 string) string {
	t.Helper()
	var raw bytes.Buffer
	if _, err := io.Copy(&raw, base64.NewDecoder(base64.StdEncoding, strings.NewReader(b64))); err != nil {
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
