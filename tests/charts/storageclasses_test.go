package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

const storageClassValues = "testdata/storageclasses-values.yaml"

// statefulSetOf is the StatefulSet of a class, by its storage class label.
func statefulSetOf(t *testing.T, r *rendered, class string) *appsv1.StatefulSet {
	t.Helper()
	for _, sts := range r.statefulSets {
		if sts.Labels["diskprobe.io/storage-class"] == class {
			return sts
		}
	}
	t.Fatalf("no StatefulSet for storage class %s", class)
	return nil
}

// classConfig is the diskprobe.yml a class's pods mount.
func classConfig(t *testing.T, r *rendered, sts *appsv1.StatefulSet) string {
	t.Helper()
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			if cm, ok := r.configMaps[v.ConfigMap.Name]; ok {
				return cm.Data["diskprobe.yml"]
			}
		}
	}
	t.Fatalf("%s mounts no ConfigMap of the chart as its config", sts.Name)
	return ""
}

// TestStorageClassGetsAStatefulSetOfItsOwnPVCs: each listed class gets a StatefulSet whose
// PVCs are of the class and go with helm uninstall; a node-local class at most one pod per
// node, a network class spread over zones; a Block class its device read-only, unprivileged.
func TestStorageClassGetsAStatefulSetOfItsOwnPVCs(t *testing.T) {
	r := render(t, "probe", []string{storageClassValues}, nil)
	if len(r.statefulSets) != 2 {
		t.Fatalf("%d StatefulSets, want one per class (2)", len(r.statefulSets))
	}
	for _, c := range []struct {
		class, name, mode, size, spread, etcdGrade string
		replicas                                   int32
	}{
		{"fast-local", "probe-diskprobe-exporter-sc-fast-local", "Filesystem", "1Gi", "node", "true", 3},
		{"ceph.block", "probe-diskprobe-exporter-sc-ceph-block", "Block", "2Gi", "zone", "false", 2},
	} {
		t.Run(c.class, func(t *testing.T) {
			sts := statefulSetOf(t, r, c.class)
			s := sts.Spec
			if sts.Name != c.name {
				t.Errorf("StatefulSet %s, want %s", sts.Name, c.name)
			}
			if p := s.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType || p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				t.Errorf("PVC retention %+v, want Delete when deleted and scaled: helm uninstall must remove the PVCs", p)
			}
			if s.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy %q, want Parallel", s.PodManagementPolicy)
			}
			if s.Replicas == nil || *s.Replicas != c.replicas {
				t.Errorf("replicas %v, want %d", s.Replicas, c.replicas)
			}
			if len(s.VolumeClaimTemplates) != 1 {
				t.Fatalf("%d volumeClaimTemplates, want 1", len(s.VolumeClaimTemplates))
			}
			pvc := s.VolumeClaimTemplates[0]
			if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != c.class {
				t.Errorf("PVC storageClassName %v, want %s", pvc.Spec.StorageClassName, c.class)
			}
			if pvc.Spec.VolumeMode == nil || string(*pvc.Spec.VolumeMode) != c.mode {
				t.Errorf("PVC volumeMode %v, want %s", pvc.Spec.VolumeMode, c.mode)
			}
			if got := pvc.Spec.Resources.Requests.Storage().String(); got != c.size {
				t.Errorf("PVC request %s, want %s", got, c.size)
			}
			if pvc.Labels["app.kubernetes.io/component"] != "storageclass" {
				t.Errorf("PVC labels %v: NOTES' kubectl get pvc -l app.kubernetes.io/component=storageclass misses it", pvc.Labels)
			}
			pod := s.Template
			for k, want := range map[string]string{"app.kubernetes.io/component": "storageclass", "diskprobe.io/storage-class": c.class, "diskprobe.io/etcd-grade": c.etcdGrade} {
				if pod.Labels[k] != want {
					t.Errorf("pod label %s=%q, want %q", k, pod.Labels[k], want)
				}
			}
			// Not the DaemonSet's pods: its Service, monitors and selector take name and instance.
			if sel := r.daemonSet.Spec.Selector.MatchLabels; pod.Labels["app.kubernetes.io/name"] == sel["app.kubernetes.io/name"] {
				t.Errorf("the class pods carry the DaemonSet's selector labels %v: its ServiceMonitor would scrape them as job diskprobe-exporter", sel)
			}
			spec := pod.Spec
			switch c.spread {
			case "node":
				a := spec.Affinity
				if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
					t.Fatalf("spread node: want one required pod anti-affinity term, got %+v", a)
				}
				term := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
				if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil {
					t.Fatalf("anti-affinity term %+v, want topologyKey kubernetes.io/hostname", term)
				}
				for k, v := range term.LabelSelector.MatchLabels {
					if pod.Labels[k] != v {
						t.Errorf("anti-affinity selects %s=%s, which the class's pods lack: they would not repel each other", k, v)
					}
				}
				if term.LabelSelector.MatchLabels["diskprobe.io/storage-class"] != c.class {
					t.Errorf("anti-affinity %v is not among the class's own pods", term.LabelSelector.MatchLabels)
				}
			case "zone":
				if len(spec.TopologySpreadConstraints) != 1 {
					t.Fatalf("spread zone: want one topology spread constraint, got %+v", spec.TopologySpreadConstraints)
				}
				tsc := spec.TopologySpreadConstraints[0]
				if tsc.TopologyKey != "topology.kubernetes.io/zone" || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway || tsc.LabelSelector.MatchLabels["diskprobe.io/storage-class"] != c.class {
					t.Errorf("topology spread %+v, want zone, ScheduleAnyway, the class's pods", tsc)
				}
				if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
					t.Error("a zone-spread class has node anti-affinity")
				}
			}
			ctr := spec.Containers[0]
			if sc := ctr.SecurityContext; sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("securityContext %+v: want the DaemonSet's unprivileged one (a Block volume needs no privilege)", ctr.SecurityContext)
			}
			for _, want := range []string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--config.file=/etc/diskprobe_exporter/diskprobe.yml"} {
				if !slices.Contains(ctr.Args, want) {
					t.Errorf("args %v lack %s", ctr.Args, want)
				}
			}
			cfg, err := config.Parse([]byte(classConfig(t, r, sts)), "diskprobe.yml")
			if err != nil {
				t.Fatalf("the exporter refuses the class's configuration: %v", err)
			}
			if len(cfg.Targets) != 1 || cfg.Targets[0].Name != c.class {
				t.Fatalf("want one target named %s, got %+v", c.class, cfg.Targets)
			}
			target := cfg.Targets[0]
			if c.mode == "Block" {
				if len(ctr.VolumeDevices) != 1 || ctr.VolumeDevices[0].Name != pvc.Name || ctr.VolumeDevices[0].DevicePath != target.Path {
					t.Errorf("volumeDevices %+v, want the PVC at the target's path %s", ctr.VolumeDevices, target.Path)
				}
				if !strings.HasPrefix(target.Path, "/dev/") {
					t.Errorf("a Block target at %s, not under /dev/ as a device target is", target.Path)
				}
				for name := range target.Probe {
					if name != "randread" && name != "seqread" {
						t.Errorf("a Block volume probed with %s: read probes only", name)
					}
				}
				for _, m := range ctr.VolumeMounts {
					if m.Name == pvc.Name {
						t.Errorf("the Block PVC is also mounted at %s", m.MountPath)
					}
				}
				if n := len(sts.Spec.Template.Spec.InitContainers); n != 0 {
					t.Errorf("%d init containers for a Block volume: nothing to prepare", n)
				}
			} else {
				mounted := false
				for _, m := range ctr.VolumeMounts {
					if m.Name == pvc.Name {
						mounted = m.MountPath == target.Path && !m.ReadOnly && m.SubPath != ""
					}
				}
				if !mounted || len(ctr.VolumeDevices) != 0 {
					t.Errorf("want the PVC mounted writable at %s from a directory of its own (subPath), got %+v", target.Path, ctr.VolumeMounts)
				}
				// The subPath directory is the init container's: it makes it a probe root
				// the exporter accepts before the kubelet would make it with the volume
				// root's mode (local-path: 0777).
				inits := sts.Spec.Template.Spec.InitContainers
				if len(inits) != 1 || len(inits[0].Args) != 2 || inits[0].Args[0] != "volume-prepare" ||
					len(inits[0].VolumeMounts) != 1 || inits[0].VolumeMounts[0].Name != pvc.Name ||
					inits[0].VolumeMounts[0].SubPath != "" || inits[0].Args[1] != inits[0].VolumeMounts[0].MountPath {
					t.Errorf("init containers %+v; want one running volume-prepare on the PVC's root", inits)
				}
				for _, m := range ctr.VolumeMounts {
					if m.Name == pvc.Name && m.SubPath != "diskprobe" {
						t.Errorf("the exporter probes the volume's %q; volume-prepare makes \"diskprobe\"", m.SubPath)
					}
				}
				if target.Limits.MinFree >= 1<<30 {
					t.Errorf("min_free %d on a volume of %s: the write probes would never run", target.Limits.MinFree, c.size)
				}
			}
		})
	}
}

// TestStorageClassPodsAreScrapedWithTheClassLabels: the class pods' monitor gives job
// diskprobe-storageclass, instance the node, and storage_class and etcd_grade from the pods'
// labels (no peer_group: the peer rules leave class targets out); with podMonitor the same by a PodMonitor.
func TestStorageClassPodsAreScrapedWithTheClassLabels(t *testing.T) {
	want := map[string]string{ // target label: source label, or "=value" for a constant
		"job":           "=diskprobe-storageclass",
		"instance":      "__meta_kubernetes_pod_node_name",
		"storage_class": "__meta_kubernetes_pod_label_diskprobe_io_storage_class",
		"etcd_grade":    "__meta_kubernetes_pod_label_diskprobe_io_etcd_grade",
	}
	for _, pm := range []bool{false, true} {
		r := render(t, "probe", []string{storageClassValues}, []string{"podMonitor.enabled=" + map[bool]string{false: "false", true: "true"}[pm]})
		var relabelings []monitoringv1.RelabelConfig
		var selector map[string]string
		if pm {
			m := monitorNamed(t, r.podMonitors, "probe-diskprobe-exporter-storageclasses")
			relabelings, selector = m.Spec.PodMetricsEndpoints[0].RelabelConfigs, m.Spec.Selector.MatchLabels
		} else {
			m := monitorNamed(t, r.serviceMonitors, "probe-diskprobe-exporter-storageclasses")
			relabelings = m.Spec.Endpoints[0].RelabelConfigs
			svc := serviceNamed(t, r, "probe-diskprobe-exporter-storageclasses")
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("the class Service is not headless")
			}
			if !labelsMatch(m.Spec.Selector.MatchLabels, svc.Labels) {
				t.Errorf("the class ServiceMonitor selects %v, not the class Service (%v)", m.Spec.Selector.MatchLabels, svc.Labels)
			}
			if r.serviceMonitor != nil && labelsMatch(r.serviceMonitor.Spec.Selector.MatchLabels, svc.Labels) {
				t.Errorf("the DaemonSet's ServiceMonitor selects the class Service: the class pods would be scraped twice")
			}
			selector = svc.Spec.Selector
		}
		for _, class := range []string{"fast-local", "ceph.block"} {
			if !labelsMatch(selector, statefulSetOf(t, r, class).Spec.Template.Labels) {
				t.Errorf("podMonitor %v: the monitor's pods %v leave out class %s", pm, selector, class)
			}
		}
		for _, rc := range relabelings {
			if rc.TargetLabel == "peer_group" {
				t.Errorf("podMonitor %v: the class pods get a peer_group: a class would join the peer rules' groups", pm)
			}
		}
		for target, source := range want {
			found := false
			for _, rc := range relabelings {
				if string(rc.TargetLabel) != target {
					continue
				}
				if v, ok := strings.CutPrefix(source, "="); ok {
					found = rc.Replacement != nil && *rc.Replacement == v && len(rc.SourceLabels) == 0
				} else {
					found = len(rc.SourceLabels) == 1 && string(rc.SourceLabels[0]) == source
				}
			}
			if !found {
				t.Errorf("podMonitor %v: no relabeling %s <- %s in %+v", pm, target, source, relabelings)
			}
		}
	}
}

func monitorNamed[M interface{ GetName() string }](t *testing.T, ms []M, name string) M {
	t.Helper()
	for _, m := range ms {
		if m.GetName() == name {
			return m
		}
	}
	t.Fatalf("no monitor %s rendered", name)
	var zero M
	return zero
}

func serviceNamed(t *testing.T, r *rendered, name string) *corev1.Service {
	t.Helper()
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %s rendered", name)
	return nil
}

// labelsMatch says whether a matchLabels selector selects labels.
func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestStorageClassConfigPassesTheExportersCheck runs the real binary's --config.check on each
// class's rendered diskprobe.yml, its path pointed at a directory here (Filesystem) or a loop
// device (Block, as root): what the pod will load, checked against a disk.
func TestStorageClassConfigPassesTheExportersCheck(t *testing.T) {
	r := render(t, "probe", []string{storageClassValues}, nil)
	bin := testenv.Binary(t)
	for _, class := range []string{"fast-local", "ceph.block"} {
		t.Run(class, func(t *testing.T) {
			data := classConfig(t, r, statefulSetOf(t, r, class))
			dir := t.TempDir()
			path := filepath.Join(dir, "data")
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(data, "path: /dev/diskprobe-pvc") {
				testenv.RequireRoot(t)
				data = strings.Replace(data, "path: /dev/diskprobe-pvc", "path: "+testenv.LoopDevice(t, 64<<20), 1)
			} else {
				data = strings.Replace(data, "path: /data", "path: "+path, 1)
			}
			file := filepath.Join(dir, "diskprobe.yml")
			if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "--config.file="+file, "--config.check").CombinedOutput()
			if err != nil {
				t.Errorf("diskprobe_exporter --config.check refuses the rendered configuration: %v\n%s\n%s", err, out, data)
			}
		})
	}
}

// TestArrivalProberRunsWithItsOwnNarrowRole: the arrival Deployment's command line, its
// downward-API owner, its own ServiceAccount (the chart's only token) and a Role of exactly
// the verbs it uses, in the release's namespace.
func TestArrivalProberRunsWithItsOwnNarrowRole(t *testing.T) {
	r := render(t, "probe", []string{storageClassValues}, []string{"arrival.env[0].name=KUBERNETES_SERVICE_HOST", "arrival.env[0].value=10.0.0.1"})
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want the arrival prober", len(r.deployments))
	}
	d := r.deployments[0]
	if d.Name != "probe-diskprobe-exporter-arrival" || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("Deployment %s with %v replicas, want probe-diskprobe-exporter-arrival with 1", d.Name, d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	ctr := spec.Containers[0]
	image := r.daemonSet.Spec.Template.Spec.Containers[0].Image
	// Both classes are in the values; ceph.block leaves arrival at its default, true.
	wantArgs := []string{"arrival", "--storage-class=fast-local", "--storage-class=ceph.block", "--interval=10m", "--timeout=5m", "--size=1Gi",
		"--namespace=monitoring", "--image=" + image, "--owner-pod-name=$(POD_NAME)", "--owner-pod-uid=$(POD_UID)", "--web.listen-address=:10053"}
	if !slices.Equal(ctr.Args, wantArgs) {
		t.Errorf("args\n%q\nwant\n%q", ctr.Args, wantArgs)
	}
	env := map[string]corev1.EnvVar{}
	var names []string
	for _, e := range ctr.Env {
		env[e.Name] = e
		names = append(names, e.Name)
	}
	for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_UID": "metadata.uid"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("env %s: %+v, want the downward API's %s", name, e, field)
		}
	}
	if !slices.Equal(names, []string{"POD_NAME", "POD_UID", "KUBERNETES_SERVICE_HOST"}) || env["KUBERNETES_SERVICE_HOST"].Value != "10.0.0.1" {
		t.Errorf("env %v: want arrival.env appended after the downward API's", names)
	}
	if spec.ServiceAccountName != d.Name || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automount %v, want its own account with the token", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	for _, sa := range r.serviceAccounts {
		automount := sa.AutomountServiceAccountToken != nil && *sa.AutomountServiceAccountToken
		if automount != (sa.Name == spec.ServiceAccountName) {
			t.Errorf("ServiceAccount %s automounts %v: only the arrival prober's may", sa.Name, automount)
		}
	}
	if len(r.roles) != 1 || len(r.roleBindings) != 1 {
		t.Fatalf("%d Roles and %d RoleBindings, want one each", len(r.roles), len(r.roleBindings))
	}
	role := r.roles[0]
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "pods"}, Verbs: []string{"create", "get", "list", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
	}
	if role.Namespace != "monitoring" || !slices.EqualFunc(role.Rules, wantRules, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("Role %s/%s rules %+v, want exactly %+v", role.Namespace, role.Name, role.Rules, wantRules)
	}
	rb := r.roleBindings[0]
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != spec.ServiceAccountName {
		t.Errorf("RoleBinding %+v does not bind the Role to the arrival prober's account", rb)
	}
	m := monitorNamed(t, r.serviceMonitors, "probe-diskprobe-exporter-arrival")
	job := false
	for _, rc := range m.Spec.Endpoints[0].RelabelConfigs {
		job = job || (rc.TargetLabel == "job" && rc.Replacement != nil && *rc.Replacement == "diskprobe-arrival")
	}
	if !job {
		t.Errorf("the arrival ServiceMonitor does not give job diskprobe-arrival: %+v", m.Spec.Endpoints[0].RelabelConfigs)
	}

	// Without a class it visits, no prober.
	for _, set := range [][]string{{"arrival.enabled=false"}, {"storageClasses[0].name=a", "storageClasses[0].arrival=false"}} {
		r := render(t, "probe", nil, set)
		if len(r.deployments)+len(r.roles)+len(r.roleBindings) != 0 {
			t.Errorf("--set %v: the arrival prober is rendered", set)
		}
	}
}

// TestStorageClassesAddObjectsAndChangeNone: with storageClasses empty (the default) nothing of
// theirs is rendered; with classes listed, every object of the default render is rendered
// byte for byte the same (the DaemonSet, its Service and monitors untouched), only new ones
// are added.
func TestStorageClassesAddObjectsAndChangeNone(t *testing.T) {
	args := templateArgs("probe", chartDir, nil, nil)
	for _, api := range monitoringAPIs {
		args = append(args, "--api-versions", api)
	}
	def := helm(t, args...)
	r := decode(t, def)
	if n := len(r.statefulSets) + len(r.deployments) + len(r.roles) + len(r.roleBindings); n != 0 || len(r.services) != 1 || len(r.serviceMonitors) != 1 {
		t.Errorf("the default render has storage-class or arrival objects")
	}
	for _, kind := range []string{"diskprobe.io/storage-class", "app.kubernetes.io/component"} {
		if strings.Contains(def, kind) {
			t.Errorf("the default render mentions %s", kind)
		}
	}
	docs := documents(helm(t, append(args, "-f", storageClassValues)...))
	defDocs := documents(def)
	for _, doc := range defDocs {
		if !slices.Contains(docs, doc) {
			t.Errorf("listing storage classes changes a document of the default render:\n%.400s", doc)
		}
	}
	if len(docs) <= len(defDocs) {
		t.Error("listing storage classes adds no document")
	}
}

// documents splits helm template's output into its documents, without the separators.
func documents(out string) []string {
	var docs []string
	for _, doc := range strings.Split("\n"+out, "\n---\n") {
		if doc = strings.TrimSpace(doc); doc != "" {
			docs = append(docs, doc)
		}
	}
	return docs
}

// TestStorageClassEntryMistakesFailNamingTheField: values.schema.json refuses a bad entry of
// storageClasses, naming the field.
func TestStorageClassEntryMistakesFailNamingTheField(t *testing.T) {
	for _, c := range []struct{ values, field string }{
		{"storageClasses: [{size: 1Gi}]", "name"},
		{"storageClasses: [{name: Fast_Local}]", "name"},
		{"storageClasses: [{name: fast, volumeMode: block}]", "volumeMode"},
		{"storageClasses: [{name: fast, spread: host}]", "spread"},
		{"storageClasses: [{name: fast, replicas: -1}]", "replicas"},
		{"storageClasses: [{name: fast, accessMode: RWO}]", "accessMode"},
		{"storageClasses: [{name: fast, etcdGrade: \"yes\"}]", "etcdGrade"},
		{"storageClasses: [{name: fast, replica: 2}]", "replica"},
		{"arrival: {intervall: 5m}", "intervall"},
		{"arrival: {interval: 5 minutes}", "interval"},
		// What the chart checks itself: read probes only on a Block volume, the path its own.
		{"storageClasses: [{name: fast, volumeMode: Block, target: {fsync: {}}}]", "target.fsync"},
		{"storageClasses: [{name: fast, target: {path: /x}}]", "target.path"},
		{"storageClasses: [{name: fast}, {name: fast}]", "fast is listed twice"},
		{"storageClasses: [{name: a.b}, {name: a-b}]", "a.b and a-b make the same object name"},
	} {
		t.Run(c.values, func(t *testing.T) {
			_, stderr, err := helmRun(t, templateArgs("probe", chartDir, []string{writeValues(t, c.values+"\n")}, nil)...)
			if err == nil {
				t.Fatalf("%s renders", c.values)
			}
			if !strings.Contains(stderr, c.field) {
				t.Errorf("%s fails without naming %s:\n%s", c.values, c.field, stderr)
			}
		})
	}
}

// TestStorageClassPodsTolerateWhatTheDaemonSetTolerates: a class is probed on the nodes the
// exporter runs on, a cluster of tainted control-plane nodes included; the arrival prober too.
func TestStorageClassPodsTolerateWhatTheDaemonSetTolerates(t *testing.T) {
	r := render(t, "probe", []string{storageClassValues}, []string{
		"tolerations[0].key=node-role.kubernetes.io/control-plane", "tolerations[0].operator=Exists", "tolerations[0].effect=NoSchedule"})
	want := r.daemonSet.Spec.Template.Spec.Tolerations
	if len(want) != 1 {
		t.Fatalf("the DaemonSet's tolerations %+v: the test set one", want)
	}
	specs := map[string]corev1.PodSpec{}
	for _, s := range r.statefulSets {
		specs[s.Name] = s.Spec.Template.Spec
	}
	for _, d := range r.deployments {
		specs[d.Name] = d.Spec.Template.Spec
	}
	if len(specs) < 2 {
		t.Fatalf("%d class StatefulSets and arrival Deployments rendered", len(specs))
	}
	for name, spec := range specs {
		if len(spec.Tolerations) != 1 || spec.Tolerations[0] != want[0] {
			t.Errorf("%s tolerates %+v; want the DaemonSet's %+v", name, spec.Tolerations, want)
		}
	}
}

// TestStorageClassOfNoReplicasIsOnlyTimed: replicas 0 renders no StatefulSet, no ConfigMap
// and no PVC for the class, and the arrival prober still visits it.
func TestStorageClassOfNoReplicasIsOnlyTimed(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte("storageClasses:\n  - {name: probed}\n  - {name: timed-only, replicas: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := render(t, "probe", []string{values}, nil)
	if len(r.statefulSets) != 1 || r.statefulSets[0].Name != "probe-diskprobe-exporter-sc-probed" {
		t.Errorf("StatefulSets %d; want the probed class's alone", len(r.statefulSets))
	}
	if _, ok := r.configMaps["probe-diskprobe-exporter-sc-timed-only"]; ok {
		t.Error("a ConfigMap for a class of 0 replicas")
	}
	if len(r.deployments) != 1 || !strings.Contains(strings.Join(r.deployments[0].Spec.Template.Spec.Containers[0].Args, " "), "--storage-class=timed-only") {
		t.Errorf("the arrival prober does not visit the class of 0 replicas: %+v", r.deployments)
	}
}

// TestNotesSayWhatEachStorageClassGot: NOTES.txt names each class's StatefulSet, or that a
// class of 0 replicas is only timed, the classes the arrival prober visits, and where to look
// for a class that cannot provision.
func TestNotesSayWhatEachStorageClassGot(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("storageClasses:\n"+
		"  - {name: local-path, etcdGrade: true}\n"+
		"  - {name: ceph.block, volumeMode: Block, spread: zone, replicas: 2, arrival: false}\n"+
		"  - {name: slow-nfs, replicas: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notes := notesRenderer(t)(true, []string{values})
	for _, want := range []string{
		"- local-path: StatefulSet probe-diskprobe-exporter-sc-local-path, 3 pods (at most one per node), each probing its own Filesystem PVC of 1Gi (ReadWriteOnce); etcd-grade",
		"- ceph.block: StatefulSet probe-diskprobe-exporter-sc-ceph-block, 2 pods (spread over zones), each probing its own Block PVC of 1Gi (ReadWriteOnce, read probes only)",
		"- slow-nfs: replicas 0, not probed continuously; its volumes' arrival is timed",
		"PVC of local-path, slow-nfs made, mounted, written once and deleted",
		"get pvc -l app.kubernetes.io/component=storageclass",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
}
