// Package charts holds the tests of the Helm chart (charts/diskprobe-exporter at the top of
// the repository): helm lint and helm template for each values
// file, every rendered object decoded strictly into the Kubernetes and prometheus-operator
// API types, and the chart's rules and dashboards compared with their single sources.
package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// chartDir is the chart, in the daemon's module.
var chartDir = testenv.RepoPath("charts", "diskprobe-exporter")

// Helm is the helm the chart tests run (internal/testenv builds it once per machine).
func Helm(t testing.TB) string { return framework.Helm(t) }

// valueSets are the configurations the chart is tested with: values files passed to helm
// with -f, and extra --set flags.
var valueSets = []struct {
	name  string
	files []string
	set   []string
}{
	{name: "defaults"},
	{name: "etcd preset", files: []string{chartDir + "/values-etcd.yaml"}},
	{name: "raw device", files: []string{"testdata/rawdevice-values.yaml"}},
	{name: "web config and PodMonitor", files: []string{"testdata/webconfig-values.yaml"}},
	{name: "release name without diskprobe", set: []string{"fullnameOverride=node-disks"}},
	{name: "storage classes", files: []string{"testdata/storageclasses-values.yaml"}},
}

// monitoringAPIs are the prometheus-operator kinds the chart renders only where the cluster
// serves them (.Capabilities.APIVersions), as helm template's --api-versions names them.
var monitoringAPIs = []string{
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PodMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
}

// render runs helm template as for a cluster with prometheus-operator's CRDs and returns the
// rendered documents, decoded into their API types strictly: a field the type does not know
// is an error.
func render(t *testing.T, release string, files, set []string) *rendered {
	t.Helper()
	args := templateArgs(release, chartDir, files, set)
	for _, api := range monitoringAPIs {
		args = append(args, "--api-versions", api)
	}
	return decode(t, helm(t, args...))
}

// templateArgs is helm template's command line for a chart, values files and --set flags.
func templateArgs(release, chart string, files, set []string) []string {
	args := []string{"template", release, chart, "--namespace", "monitoring"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// decode splits helm template's output into documents and decodes each strictly. The
// DaemonSet's own Service, monitors and NetworkPolicy (no app.kubernetes.io/component label)
// are its fields of their kind; those of the storage classes and the arrival prober are in
// the slices.
func decode(t *testing.T, out string) *rendered {
	t.Helper()
	r := &rendered{configMaps: map[string]*corev1.ConfigMap{}}
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		var obj any
		component := meta.Metadata.Labels["app.kubernetes.io/component"] != ""
		switch meta.Kind {
		case "":
			continue // a comment-only document
		case "DaemonSet":
			r.daemonSet = &appsv1.DaemonSet{}
			obj = r.daemonSet
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			obj = cm
			defer func() { r.configMaps[cm.Name] = cm }()
		case "Service":
			svc := &corev1.Service{}
			obj = svc
			r.services = append(r.services, svc)
			if !component {
				r.service = svc
			}
		case "ServiceAccount":
			sa := &corev1.ServiceAccount{}
			obj = sa
			r.serviceAccounts = append(r.serviceAccounts, sa)
		case "ServiceMonitor":
			sm := &monitoringv1.ServiceMonitor{}
			obj = sm
			r.serviceMonitors = append(r.serviceMonitors, sm)
			if !component {
				r.serviceMonitor = sm
			}
		case "PodMonitor":
			pm := &monitoringv1.PodMonitor{}
			obj = pm
			r.podMonitors = append(r.podMonitors, pm)
			if !component {
				r.podMonitor = pm
			}
		case "PrometheusRule":
			r.rule = &monitoringv1.PrometheusRule{}
			obj = r.rule
		case "NetworkPolicy":
			np := &networkingv1.NetworkPolicy{}
			obj = np
			r.networkPolicies = append(r.networkPolicies, np)
			if !component {
				r.networkPolicy = np
			}
		case "StatefulSet":
			sts := &appsv1.StatefulSet{}
			obj = sts
			r.statefulSets = append(r.statefulSets, sts)
		case "Deployment":
			d := &appsv1.Deployment{}
			obj = d
			r.deployments = append(r.deployments, d)
		case "Role":
			role := &rbacv1.Role{}
			obj = role
			r.roles = append(r.roles, role)
		case "RoleBinding":
			rb := &rbacv1.RoleBinding{}
			obj = rb
			r.roleBindings = append(r.roleBindings, rb)
		default:
			t.Fatalf("the chart renders a %s, which the test does not know", meta.Kind)
		}
		if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s does not decode strictly into its API type: %v\n%s", meta.Kind, err, doc)
		}
	}
	if r.daemonSet == nil {
		t.Fatal("no DaemonSet rendered")
	}
	return r
}

type rendered struct {
	daemonSet      *appsv1.DaemonSet
	configMaps     map[string]*corev1.ConfigMap
	service        *corev1.Service
	serviceMonitor *monitoringv1.ServiceMonitor
	podMonitor     *monitoringv1.PodMonitor
	rule           *monitoringv1.PrometheusRule
	networkPolicy  *networkingv1.NetworkPolicy

	// Every object of its kind, the storage classes' and the arrival prober's included.
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	serviceMonitors []*monitoringv1.ServiceMonitor
	podMonitors     []*monitoringv1.PodMonitor
	networkPolicies []*networkingv1.NetworkPolicy
	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	stdout, _ := helmStderr(t, args...)
	return stdout
}

// helmStderr runs helm, fails the test if it fails, and returns its stdout and stderr (where
// its warnings go).
func helmStderr(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, err := helmRun(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

// helmRun runs helm and returns its outputs and error, for tests that expect it to fail.
func helmRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(Helm(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestChartLintsAndRendersForEveryValuesFile(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			// The prometheus-operator objects forced: lint knows no cluster (no --api-versions).
			args := []string{"lint", "--strict", chartDir, "--set", "serviceMonitor.forceEnable=true,prometheusRule.forceEnable=true"}
			for _, f := range vs.files {
				args = append(args, "-f", f)
			}
			for _, s := range vs.set {
				args = append(args, "--set", s)
			}
			helm(t, args...)
			r := render(t, "probe", vs.files, vs.set)
			exporterConfigParses(t, r)
			leastPrivilege(t, r)
		})
	}
}

// exporterConfigParses feeds the rendered diskprobe.yml to the exporter's own parser.
func exporterConfigParses(t *testing.T, r *rendered) {
	t.Helper()
	n := 0
	for _, cm := range r.configMaps {
		if data, ok := cm.Data["diskprobe.yml"]; ok {
			n++
			if _, err := config.Parse([]byte(data), "diskprobe.yml"); err != nil {
				t.Errorf("the exporter refuses the rendered configuration of ConfigMap %s: %v\n%s", cm.Name, err, data)
			}
		}
	}
	if n == 0 {
		t.Fatal("no ConfigMap holds diskprobe.yml")
	}
}

// leastPrivilege: a read-only root filesystem, no privilege escalation (unless privileged,
// where the API server forbids saying so), every capability dropped and none added back, and
// privileged only with a block device target.
func leastPrivilege(t *testing.T, r *rendered) {
	t.Helper()
	c := r.daemonSet.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is not read-only")
	}
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities: want drop [ALL] and nothing added, got %+v", sc.Capabilities)
	}
	blockDevice := false
	for _, v := range r.daemonSet.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathBlockDev {
			blockDevice = true
		}
	}
	privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
	if privileged != blockDevice {
		t.Errorf("privileged %v with a block device target %v: privileged only where a block device needs it", privileged, blockDevice)
	}
	switch escalation := sc != nil && sc.AllowPrivilegeEscalation != nil; {
	case privileged && escalation && !*sc.AllowPrivilegeEscalation:
		// The API server refuses this pair (the podman test could not see it; a real
		// cluster did): "cannot set allowPrivilegeEscalation to false and privileged to true".
		t.Error("privileged with allowPrivilegeEscalation false: the API server refuses the DaemonSet")
	case !privileged && (!escalation || *sc.AllowPrivilegeEscalation):
		t.Error("privilege escalation is not off")
	}
	for _, m := range c.VolumeMounts {
		if (m.MountPath == "/host/proc" || m.MountPath == "/host/sys") && !m.ReadOnly {
			t.Errorf("%s is mounted read-write", m.MountPath)
		}
	}
	for _, want := range []string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
}

func TestEtcdPresetRunsOnControlPlanesAndWritesNothingInEtcdsDirectory(t *testing.T) {
	r := render(t, "probe", []string{chartDir + "/values-etcd.yaml"}, nil)
	spec := r.daemonSet.Spec.Template.Spec
	// Every NoSchedule and NoExecute taint of the selected nodes: kubeadm's, RKE2's
	// etcd:NoExecute, and any a distribution or a team adds.
	for _, taint := range []corev1.Taint{
		{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/etcd", Value: "true", Effect: corev1.TaintEffectNoExecute},
		{Key: "CriticalAddonsOnly", Value: "true", Effect: corev1.TaintEffectNoExecute},
		{Key: "example.com/dedicated", Value: "etcd", Effect: corev1.TaintEffectNoSchedule},
	} {
		tolerated := false
		for _, tol := range spec.Tolerations {
			tolerated = tolerated || tol.ToleratesTaint(&taint)
		}
		if !tolerated {
			t.Errorf("the etcd preset does not tolerate the taint %s=%s:%s", taint.Key, taint.Value, taint.Effect)
		}
	}
	for _, label := range []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/etcd"} {
		selected := false
		if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for _, e := range term.MatchExpressions {
					if e.Key == label && e.Operator == corev1.NodeSelectorOpExists {
						selected = true
					}
				}
			}
		}
		if !selected {
			t.Errorf("no node affinity term selecting %s nodes", label)
		}
	}

	var cfg config.Config
	for _, cm := range r.configMaps {
		if d, ok := cm.Data["diskprobe.yml"]; ok {
			c, err := config.Parse([]byte(d), "diskprobe.yml")
			if err != nil {
				t.Fatal(err)
			}
			cfg = *c
		}
	}
	if len(cfg.Targets) != 1 || cfg.Targets[0].Path != "/var/lib/etcd" || cfg.Targets[0].ProbeDir == "" {
		t.Fatalf("want one target on /var/lib/etcd with a probe_dir, got %+v", cfg.Targets)
	}
	probeDir := cfg.Targets[0].ProbeDir
	if strings.HasPrefix(probeDir+"/", "/var/lib/etcd/") {
		t.Errorf("probe_dir %s is inside etcd's data directory", probeDir)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/var/lib/etcd"]; !ok || !m.ReadOnly {
		t.Errorf("/var/lib/etcd must be mounted read-only (it is only stat'ed), got %+v", m)
	}
	if m, ok := mounts[probeDir]; !ok || m.ReadOnly {
		t.Errorf("the probe directory %s must be mounted read-write, got %+v", probeDir, m)
	}
}

// The etcd preset's commented alternative, for a disk of its own mounted at /var/lib/etcd:
// the probe directory directly under the mount point is the only writable mount, and
// etcd's data directory stays read-only.
func TestEtcdPresetAlternativeForADiskMountedAtTheDataDirectory(t *testing.T) {
	values, err := os.ReadFile(chartDir + "/values-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*# probe_dir: (\S+)`).FindSubmatch(values)
	if m == nil {
		t.Fatal("values-etcd.yaml has no commented probe_dir for a disk mounted at the data directory")
	}
	probeDir := string(m[1])
	if filepath.Dir(probeDir) != "/var/lib/etcd" {
		t.Fatalf("the commented probe_dir %s is not directly under /var/lib/etcd, the only place the exporter accepts inside it", probeDir)
	}
	r := render(t, "probe", []string{chartDir + "/values-etcd.yaml"}, []string{"config.targets[0].probe_dir=" + probeDir})
	spec := r.daemonSet.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	writable := 0
	for _, vm := range spec.Containers[0].VolumeMounts {
		v := volumes[vm.Name]
		if v.HostPath == nil {
			continue
		}
		switch vm.MountPath {
		case "/var/lib/etcd":
			if !vm.ReadOnly {
				t.Errorf("/var/lib/etcd is mounted writable")
			}
		case probeDir:
			if vm.ReadOnly || v.HostPath.Path != probeDir || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
				t.Errorf("the probe directory must be a writable hostPath the kubelet creates, got %+v %+v", vm, v.HostPath)
			}
		}
		if !vm.ReadOnly {
			writable++
		}
	}
	if writable != 1 {
		t.Errorf("%d writable host mounts, want only the probe directory", writable)
	}
}

// TestRulesSelectTheJobTheServiceMonitorGives: the shipped rules select the exporter's job
// by regex; the ServiceMonitor's and PodMonitor's job must match it whatever the release
// is called.
func TestRulesSelectTheJobTheMonitorsGive(t *testing.T) {
	re := jobSelector(t)
	for _, vs := range []struct {
		release string
		set     []string
		files   []string
	}{
		{"probe", nil, nil},
		{"probe", []string{"fullnameOverride=node-disks"}, nil},
		{"node-disks", nil, []string{"testdata/webconfig-values.yaml"}},
	} {
		r := render(t, vs.release, vs.files, vs.set)
		var jobLabel string
		var labels map[string]string
		switch {
		case r.serviceMonitor != nil:
			jobLabel, labels = r.serviceMonitor.Spec.JobLabel, r.service.Labels
		case r.podMonitor != nil:
			jobLabel, labels = r.podMonitor.Spec.JobLabel, r.daemonSet.Spec.Template.Labels
		default:
			t.Fatal("neither a ServiceMonitor nor a PodMonitor rendered")
		}
		job := labels[jobLabel]
		if jobLabel == "" || !re.MatchString(job) {
			t.Errorf("release %q %v: job label %q (from %q) does not match the rules' selector %s", vs.release, vs.set, job, jobLabel, re)
		}
	}
}

// jobSelector is the job regex the shipped rules use.
func jobSelector(t *testing.T) *regexp.Regexp {
	data, err := os.ReadFile(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`job=~"([^"]+)"`).FindSubmatch(data)
	if m == nil {
		t.Fatal("the rules select no job by regex")
	}
	return regexp.MustCompile("^(?:" + string(m[1]) + ")$")
}

func TestPrometheusRuleIsTheShippedRuleFile(t *testing.T) {
	r := render(t, "probe", nil, nil)
	if r.rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	got, err := json.Marshal(r.rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// The one default the chart knows better than the file: DiskprobeDaemonSetIncomplete reads
	// the release's own DaemonSet (daemonSetSelector empty).
	if !bytes.Contains(data, []byte(`daemonset=~".*diskprobe.*"`)) || bytes.Contains(got, []byte(`daemonset=~\".*diskprobe.*\"`)) {
		t.Errorf("the PrometheusRule does not select the release's DaemonSet in place of the file's daemonset=~\".*diskprobe.*\"")
	}
	data = bytes.ReplaceAll(data, []byte(`daemonset=~".*diskprobe.*"`), []byte(`namespace="monitoring", daemonset="probe-diskprobe-exporter"`))
	var file monitoringv1.PrometheusRuleSpec
	if err := sigsyaml.UnmarshalStrict(data, &file); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(file)
	if !bytes.Equal(got, want) {
		t.Errorf("the PrometheusRule's groups differ from alerts/diskprobe.rules.yml")
	}
	if n := len(file.Groups); n == 0 {
		t.Error("alerts/diskprobe.rules.yml has no groups")
	}
	// Every rule file of alerts/ reaches the chart.
	files, _ := filepath.Glob(testenv.RepoPath("alerts", "*.yml"))
	for _, f := range files {
		if filepath.Base(f) == "diskprobe.rules.yml" {
			continue
		}
		t.Errorf("%s is not in the chart's PrometheusRule", f)
	}
}

// TestRunbookURLBaseReachesEveryAlert: prometheusRule.runbookUrlBase points every alert's
// runbook_url at the user's own copy of the runbook, each at its own anchor.
func TestRunbookURLBaseReachesEveryAlert(t *testing.T) {
	const base = "https://wiki.example.com/ops/diskprobe-runbook"
	r := render(t, "probe", nil, []string{"prometheusRule.runbookUrlBase=" + base + "/"})
	if r.rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	alerts := 0
	for _, g := range r.rule.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				continue
			}
			alerts++
			if url := rule.Annotations["runbook_url"]; !strings.HasPrefix(url, base+"#") {
				t.Errorf("%s: runbook_url %q, want %s#<its anchor>", rule.Alert, url, base)
			}
		}
	}
	if alerts == 0 {
		t.Error("no alert in the PrometheusRule")
	}
}

// TestPeerGroupLabelsReachRulesAndDashboards: peerGroupLabels regroups the peer rules and the
// target dashboard's peer panels, as the mixin's _config.peerGroupLabels does.
func TestPeerGroupLabelsReachRulesAndDashboards(t *testing.T) {
	const labels = "job, etcd_cluster, target"
	// helm's --set splits on commas: a user escapes them, as here, or uses a values file.
	r := render(t, "probe", nil, []string{"peerGroupLabels=" + strings.ReplaceAll(labels, ",", `\,`)})
	if r.rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	rules, _ := json.Marshal(r.rule.Spec)
	if strings.Contains(string(rules), "job, cluster, peer_group, target") {
		t.Error("the PrometheusRule keeps the default peer group labels")
	}
	if !strings.Contains(string(rules), "by ("+labels+")") {
		t.Error("no rule groups by the configured peer group labels")
	}
	dashboards := ""
	for _, cm := range r.configMaps {
		for _, v := range cm.Data {
			dashboards += v
		}
	}
	if strings.Contains(dashboards, "job, cluster, peer_group, target") || !strings.Contains(dashboards, labels) {
		t.Error("the dashboards keep the default peer group labels")
	}
}

func TestDashboardConfigMapsAreTheShippedDashboards(t *testing.T) {
	r := render(t, "probe", nil, nil)
	files, err := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	found := map[string]bool{}
	for _, cm := range r.configMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		for key, data := range cm.Data {
			want, err := os.ReadFile(testenv.RepoPath("dashboards", key))
			if err != nil {
				t.Errorf("ConfigMap %s holds %s, which dashboards/ does not have", cm.Name, key)
				continue
			}
			if data != strings.TrimSuffix(string(want), "\n") {
				t.Errorf("ConfigMap %s: %s differs from dashboards/%s", cm.Name, key, key)
			}
			found[key] = true
		}
	}
	for _, f := range files {
		if !found[filepath.Base(f)] {
			t.Errorf("dashboards/%s has no ConfigMap labelled grafana_dashboard: \"1\" (run `make chart-files`)", filepath.Base(f))
		}
	}
}

// TestChartValuesAreInTheReadme keeps values.yaml and the values table of docs/kubernetes.md
// (the README's Kubernetes section until it moved there) in step.
func TestChartValuesAreInTheReadme(t *testing.T) {
	data, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(testenv.RepoPath("docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for key := range values {
		if !bytes.Contains(readme, []byte("`"+key)) {
			t.Errorf("values.yaml key %q is not in docs/kubernetes.md's values table", key)
		}
	}
}

// TestPeerGroupsOnlyWhereALabelSaysSo: by default a series is a member of a group of peers only
// with a non-empty peer_group label, so the default install (the same target on every node) makes
// no fleet-wide group; the etcd preset's members are its etcd target (control planes only).
func TestPeerGroupsOnlyWhereALabelSaysSo(t *testing.T) {
	for _, c := range []struct {
		name      string
		files     []string
		want, not string
	}{
		{"defaults", nil, `peer_group!=""`, `target="etcd"`},
		{"etcd preset", []string{chartDir + "/values-etcd.yaml"}, `target="etcd"`, `peer_group!=""`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, "probe", c.files, nil)
			if r.rule == nil {
				t.Fatal("no PrometheusRule rendered")
			}
			members := 0
			for _, g := range r.rule.Spec.Groups {
				for _, rule := range g.Rules {
					expr := rule.Expr.String()
					if strings.Contains(expr, "diskprobe_fdatasync_duration_seconds") && strings.Contains(expr, "by (job, cluster, peer_group, target, instance)") {
						members++
						if !strings.Contains(expr, c.want) || strings.Contains(expr, c.not) {
							t.Errorf("%s: a peer member rule without %s:\n%s", g.Name, c.want, expr)
						}
					}
				}
			}
			if members == 0 {
				t.Error("no peer member rule in the PrometheusRule")
			}
		})
	}
}
