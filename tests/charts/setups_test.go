package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestPodsStayOffWindowsNodesWhateverNodeSelectorIsSet: by default the pods select Linux
// nodes (a mixed cluster would otherwise schedule pods onto Windows nodes that never start
// them), and a nodeSelector the user sets is merged with that, not in place of it.
func TestPodsStayOffWindowsNodesWhateverNodeSelectorIsSet(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string
		set   []string
		want  map[string]string
	}{
		{name: "defaults", want: map[string]string{"kubernetes.io/os": "linux"}},
		{name: "etcd preset", files: []string{chartDir + "/values-etcd.yaml"}, want: map[string]string{"kubernetes.io/os": "linux"}},
		{name: "a label of the user's", set: []string{"nodeSelector.disktype=ssd"}, want: map[string]string{"kubernetes.io/os": "linux", "disktype": "ssd"}},
	} {
		r := render(t, "probe", c.files, c.set)
		got := r.daemonSet.Spec.Template.Spec.NodeSelector
		if len(got) != len(c.want) {
			t.Errorf("%s: nodeSelector %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: nodeSelector %v, want %v", c.name, got, c.want)
			}
		}
	}
}

// TestKubePrometheusStackReleaseLabelReachesEveryOperatorObject: monitoringLabels.release puts
// the label kube-prometheus-stack's Prometheus selects by on the ServiceMonitor (or PodMonitor)
// and the PrometheusRule; an empty value puts none; per-object labels are added beside it.
func TestKubePrometheusStackReleaseLabelReachesEveryOperatorObject(t *testing.T) {
	r := render(t, "probe", nil, []string{"monitoringLabels.release=kps", "prometheusRule.labels.team=storage"})
	if got := r.serviceMonitor.Labels["release"]; got != "kps" {
		t.Errorf("ServiceMonitor release label %q, want kps", got)
	}
	if got := r.rule.Labels["release"]; got != "kps" || r.rule.Labels["team"] != "storage" {
		t.Errorf("PrometheusRule labels %v, want release=kps and team=storage", r.rule.Labels)
	}
	r = render(t, "probe", nil, []string{"monitoringLabels.release=kps", "podMonitor.enabled=true"})
	if got := r.podMonitor.Labels["release"]; got != "kps" {
		t.Errorf("PodMonitor release label %q, want kps", got)
	}
	r = render(t, "probe", nil, nil)
	if _, ok := r.serviceMonitor.Labels["release"]; ok {
		t.Errorf("an empty monitoringLabels.release put a release label on the ServiceMonitor: %v", r.serviceMonitor.Labels)
	}
	if _, ok := r.rule.Labels["release"]; ok {
		t.Errorf("an empty monitoringLabels.release put a release label on the PrometheusRule: %v", r.rule.Labels)
	}
}

// TestDiskprobeSelectorReachesRulesAndDashboards: diskprobeSelector replaces the rules' (and
// any dashboard's) selector of the exporter's job, as the mixin's _config.diskprobeSelector
// does; the default leaves them as the shipped files have them.
func TestDiskprobeSelectorReachesRulesAndDashboards(t *testing.T) {
	const shipped = `job=~".*diskprobe.*"`
	const own = `job="kubernetes-pods", app_kubernetes_io_name="diskprobe-exporter"`
	def := render(t, "probe", nil, []string{"rulesConfigMap.enabled=true"})
	defRules, _ := json.Marshal(def.rule.Spec)
	if !strings.Contains(string(defRules), "up{"+strings.ReplaceAll(shipped, `"`, `\"`)+"}") {
		t.Fatal("with the default selector the PrometheusRule lost the shipped up{job=~\".*diskprobe.*\"}")
	}
	file := writeValues(t, "diskprobeSelector: '"+own+"'\nrulesConfigMap: {enabled: true}\n")
	r := render(t, "probe", []string{file}, nil)
	rules, _ := json.Marshal(r.rule.Spec)
	for name, text := range map[string]string{"PrometheusRule": string(rules), "rules ConfigMap": r.configMaps["probe-diskprobe-exporter-rules"].Data["diskprobe.rules.yml"]} {
		if strings.Contains(text, "diskprobe.*") {
			t.Errorf("the %s keeps the shipped selector", name)
		}
	}
	if !strings.Contains(string(rules), "absent(up{"+strings.ReplaceAll(own, `"`, `\"`)+"})") {
		t.Errorf("DiskprobeExporterAbsent does not select %s", own)
	}
	// The dashboards: the selector inside their JSON strings is escaped, and so is the value
	// that replaces it; each stays valid JSON.
	for name, cm := range r.configMaps {
		for key, data := range cm.Data {
			if !strings.HasSuffix(key, ".json") {
				continue
			}
			if !json.Valid([]byte(data)) {
				t.Errorf("ConfigMap %s: %s is not JSON with the selector set", name, key)
			}
			if strings.Contains(data, `diskprobe.*\"`) {
				t.Errorf("ConfigMap %s: %s keeps the shipped selector", name, key)
			}
		}
	}
}

// TestRulesConfigMapHoldsThePrometheusRulesGroups: the plain rule file for a Prometheus without
// the operator is rendered whatever the cluster serves, in the namespace asked for, with
// exactly the PrometheusRule's groups, and Prometheus's own rule loader accepts it (promtool
// is run on it in tests/alerts; here its structure).
func TestRulesConfigMapHoldsThePrometheusRulesGroups(t *testing.T) {
	args := templateArgs("probe", chartDir, nil, []string{"rulesConfigMap.enabled=true", "rulesConfigMap.namespace=prom", "prometheusRule.forceEnable=true"})
	r := decode(t, helm(t, args...))
	cm := r.configMaps["probe-diskprobe-exporter-rules"]
	if cm == nil {
		t.Fatal("no rules ConfigMap rendered without the operator's APIs")
	}
	if cm.Namespace != "prom" {
		t.Errorf("the rules ConfigMap is in namespace %q, want prom", cm.Namespace)
	}
	var file monitoringv1.PrometheusRuleSpec
	if err := sigsyaml.UnmarshalStrict([]byte(cm.Data["diskprobe.rules.yml"]), &file); err != nil {
		t.Fatalf("diskprobe.rules.yml is not a rule file: %v", err)
	}
	got, _ := json.Marshal(file)
	want, _ := json.Marshal(r.rule.Spec)
	if string(got) != string(want) {
		t.Error("the rules ConfigMap's groups differ from the PrometheusRule's")
	}
	if r := render(t, "probe", nil, nil); len(r.configMaps) != 3 {
		t.Errorf("by default %d ConfigMaps, want the configuration and the two dashboards", len(r.configMaps))
	}
}

// TestNetworkPolicyLetsOnlyPrometheusReachTheMetricsPort: off by default; on, it selects the
// release's pods, admits ingress to the metrics port from the configured peers (Prometheus
// pods by default) only and says nothing of egress; an empty peer list is refused rather than
// rendered as "from anywhere".
func TestNetworkPolicyLetsOnlyPrometheusReachTheMetricsPort(t *testing.T) {
	if r := render(t, "probe", nil, nil); r.networkPolicy != nil {
		t.Error("a NetworkPolicy by default")
	}
	r := render(t, "probe", nil, []string{"networkPolicy.enabled=true"})
	np := r.networkPolicy
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	for k, v := range r.daemonSet.Spec.Selector.MatchLabels {
		if np.Spec.PodSelector.MatchLabels[k] != v {
			t.Errorf("the policy selects %v, not the DaemonSet's pods %v", np.Spec.PodSelector.MatchLabels, r.daemonSet.Spec.Selector.MatchLabels)
		}
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != "Ingress" || len(np.Spec.Egress) != 0 {
		t.Errorf("policy types %v, egress %v: want Ingress only", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "metrics" {
		t.Fatalf("ingress %+v: want one rule, to the port named metrics", np.Spec.Ingress)
	}
	from := np.Spec.Ingress[0].From
	if len(from) != 1 || from[0].PodSelector == nil || from[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" || from[0].NamespaceSelector == nil {
		t.Errorf("from %+v: want pods labelled app.kubernetes.io/name=prometheus in any namespace", from)
	}
	port := r.daemonSet.Spec.Template.Spec.Containers[0].Ports[0]
	if port.Name != "metrics" {
		t.Errorf("the container's port is named %q: the policy's port names metrics", port.Name)
	}
	_, stderr, err := helmRun(t, templateArgs("probe", chartDir, []string{writeValues(t, "networkPolicy: {enabled: true, from: []}\n")}, nil)...)
	if err == nil || !strings.Contains(stderr, "from") {
		t.Errorf("an empty networkPolicy.from renders (%v):\n%s", err, stderr)
	}
}

// TestPodMonitorScrapesTheExporterOverTLS: the PodMonitor has the scheme, TLS and basic auth
// the exporter's web config needs, as the ServiceMonitor does (a PodMonitor's tlsConfig takes
// Secret references: the operator's SafeTLSConfig).
func TestPodMonitorScrapesTheExporterOverTLS(t *testing.T) {
	r := render(t, "probe", []string{"testdata/webconfig-values.yaml"}, nil)
	if r.podMonitor == nil {
		t.Fatal("no PodMonitor rendered")
	}
	ep := r.podMonitor.Spec.PodMetricsEndpoints[0]
	if ep.Scheme != "https" {
		t.Errorf("PodMonitor scheme %q, want https for the exporter's TLS", ep.Scheme)
	}
	if ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Name != "diskprobe-web" {
		t.Errorf("PodMonitor tlsConfig %+v, want the CA from the Secret", ep.TLSConfig)
	}
	if ep.BasicAuth == nil || ep.BasicAuth.Username.Name != "diskprobe-web" {
		t.Errorf("PodMonitor basicAuth %+v, want the Secret's", ep.BasicAuth)
	}
	var instance bool
	for _, rl := range ep.RelabelConfigs {
		instance = instance || rl.TargetLabel == "instance"
	}
	if !instance {
		t.Error("the PodMonitor does not name the node as instance")
	}
}

// TestNotesSayWhatWasRenderedSkippedAndNext: the NOTES helm install prints name the objects
// rendered, the operator's objects skipped (no CRDs) and why, the missing release label
// kube-prometheus-stack selects by, and the commands to run next.
func TestNotesSayWhatWasRenderedSkippedAndNext(t *testing.T) {
	notes := notesRenderer(t)
	without := notes(false, nil)
	for _, want := range []string{"DaemonSet probe-diskprobe-exporter", "Skipped: ServiceMonitor, PrometheusRule", "prometheus-without-the-operator",
		"kubectl -n diskprobe rollout status daemonset/probe-diskprobe-exporter", "violates PodSecurity", "up{job=\"diskprobe-exporter\"}"} {
		if !strings.Contains(without, want) {
			t.Errorf("NOTES without the operator do not say %q:\n%s", want, without)
		}
	}
	if strings.Contains(without, "No `release` label") {
		t.Error("NOTES warn of a release label when no operator object was rendered")
	}
	with := notes(true, nil)
	if strings.Contains(with, "Skipped") || !strings.Contains(with, "ServiceMonitor probe-diskprobe-exporter") || !strings.Contains(with, "No `release` label") {
		t.Errorf("NOTES with the operator and no release label:\n%s", with)
	}
	labelled := notes(true, nil, "monitoringLabels.release=kube-prometheus-stack", "networkPolicy.enabled=true")
	if strings.Contains(labelled, "No `release` label") || !strings.Contains(labelled, "release=kube-prometheus-stack") || !strings.Contains(labelled, "NetworkPolicy probe-diskprobe-exporter") {
		t.Errorf("NOTES with the release label and a NetworkPolicy:\n%s", labelled)
	}
}

// notesRenderer returns a function rendering NOTES.txt for values files and --set flags, with
// or without the operator's APIs. helm install --dry-run wants a cluster; helm template renders
// no NOTES. So a copy of the chart renders NOTES.txt through tpl, in a ConfigMap: the same
// text, values and capabilities.
func notesRenderer(t *testing.T) func(apis bool, files []string, set ...string) string {
	t.Helper()
	chart := filepath.Join(t.TempDir(), "diskprobe-exporter")
	testenv.Run(t, "cp", "-r", chartDir, chart)
	testenv.Run(t, "cp", filepath.Join(chartDir, "templates", "NOTES.txt"), filepath.Join(chart, "files", "notes.txt"))
	if err := os.WriteFile(filepath.Join(chart, "templates", "notes-test.yaml"), []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ tpl (.Files.Get \"files/notes.txt\") . | toJson }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(apis bool, files []string, set ...string) string {
		t.Helper()
		args := append(templateArgs("probe", chart, files, set), "--namespace", "diskprobe", "--show-only", "templates/notes-test.yaml")
		if apis {
			for _, api := range monitoringAPIs {
				args = append(args, "--api-versions", api)
			}
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := sigsyaml.Unmarshal([]byte(helm(t, args...)), &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["notes"]
	}
}

// TestInstallCommandIsTheSameEverywhere: README.md, the chart's README (helm show readme) and
// docs/kubernetes.md give one install, in the order that works under Pod Security
// (namespace, label, install; no --create-namespace), with the chart's version, its etcd
// preset and every --set a key of values.yaml.
func TestInstallCommandIsTheSameEverywhere(t *testing.T) {
	block := func(name, text string) string {
		for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
			if strings.Contains(m[1], "helm install") {
				return m[1]
			}
		}
		t.Fatalf("%s has no shell block with helm install", name)
		return ""
	}
	readme, err := os.ReadFile(testenv.RepoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(testenv.RepoPath("docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	chartReadme := helm(t, "show", "readme", chartDir)
	want := block("README.md", string(readme))
	for name, text := range map[string]string{"the chart's README": chartReadme, "docs/kubernetes.md": string(docs)} {
		if got := block(name, text); got != want {
			t.Errorf("%s installs with\n%s\nREADME.md with\n%s", name, got, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(want), "\n")
	order := []string{"helm pull", "kubectl create namespace", "kubectl label namespace", "helm install"}
	for i, prefix := range order {
		if i >= len(lines) || !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d of the install is %q, want %s (the order that works under Pod Security)", i+1, lines[min(i, len(lines)-1)], prefix)
		}
	}
	if strings.Contains(want, "--create-namespace") {
		t.Error("the install creates its namespace with helm, which cannot label it first")
	}
	chart := helm(t, "show", "chart", chartDir)
	version := regexp.MustCompile(`(?m)^version: (\S+)`).FindStringSubmatch(chart)
	if version == nil || !strings.Contains(want, "--version "+version[1]+" ") {
		t.Errorf("the install does not pull the chart's version %v", version)
	}
	if !strings.Contains(want, "-f diskprobe-exporter/values-etcd.yaml") || !strings.Contains(want, "monitoringLabels.release=") {
		t.Error("the install does not use the etcd preset and the release label")
	}
	if ns := regexp.MustCompile(`kubectl create namespace (\S+)`).FindStringSubmatch(want); ns == nil ||
		!strings.Contains(want, "kubectl label namespace "+ns[1]+" pod-security.kubernetes.io/enforce=privileged") || !strings.Contains(want, "-n "+ns[1]+" ") {
		t.Error("the install does not label the namespace it creates and installs into privileged")
	}
}

// writeValues writes a values file for one test.
func writeValues(t *testing.T, yaml string) string {
	t.Helper()
	f := t.TempDir() + "/values.yaml"
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
