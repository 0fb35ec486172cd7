package charts

import (
	"os"
	"strings"
	"testing"

	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestPodSecurityLevelTheReadmeNames evaluates the rendered pods with the Pod Security
// admission's own checks (k8s.io/pod-security-admission, what the API server runs): under
// `baseline` (and so `restricted`) they are rejected for their hostPath volumes, so the
// namespace must enforce `privileged`, which docs/kubernetes.md must say with the exact label.
// So are the storage-class pods; the arrival prober meets `restricted`.
func TestPodSecurityLevelTheReadmeNames(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		t.Fatal(err)
	}
	latest := func(level api.Level) api.LevelVersion {
		return api.LevelVersion{Level: level, Version: api.LatestVersion()}
	}
	for _, vs := range valueSets {
		r := render(t, "probe", vs.files, vs.set)
		tmpl := r.daemonSet.Spec.Template
		baseline := policy.AggregateCheckResults(evaluator.EvaluatePod(latest(api.LevelBaseline), &tmpl.ObjectMeta, &tmpl.Spec))
		if baseline.Allowed {
			t.Errorf("%s: the pod passes Pod Security baseline; the documented privileged label is more than it needs", vs.name)
		} else if !strings.Contains(strings.Join(baseline.ForbiddenReasons, ","), "hostPath") {
			t.Errorf("%s: baseline forbids the pod for %v, not the hostPath volumes the documentation names", vs.name, baseline.ForbiddenReasons)
		}
		privileged := policy.AggregateCheckResults(evaluator.EvaluatePod(latest(api.LevelPrivileged), &tmpl.ObjectMeta, &tmpl.Spec))
		if !privileged.Allowed {
			t.Errorf("%s: Pod Security privileged forbids the pod: %v", vs.name, privileged.ForbiddenReasons)
		}
	}
	// The storage-class pods mount the node's /proc and /sys as the DaemonSet's do: the same
	// level, privileged. The arrival prober mounts nothing of the node and runs as nobody:
	// restricted.
	r := render(t, "probe", []string{storageClassValues}, nil)
	for _, sts := range r.statefulSets {
		tmpl := sts.Spec.Template
		baseline := policy.AggregateCheckResults(evaluator.EvaluatePod(latest(api.LevelBaseline), &tmpl.ObjectMeta, &tmpl.Spec))
		if baseline.Allowed || !strings.Contains(strings.Join(baseline.ForbiddenReasons, ","), "hostPath") {
			t.Errorf("%s: baseline allows %v or forbids it for %v, not for the hostPath volumes", sts.Name, baseline.Allowed, baseline.ForbiddenReasons)
		}
		if privileged := policy.AggregateCheckResults(evaluator.EvaluatePod(latest(api.LevelPrivileged), &tmpl.ObjectMeta, &tmpl.Spec)); !privileged.Allowed {
			t.Errorf("%s: Pod Security privileged forbids the pod: %v", sts.Name, privileged.ForbiddenReasons)
		}
	}
	for _, d := range r.deployments {
		tmpl := d.Spec.Template
		if restricted := policy.AggregateCheckResults(evaluator.EvaluatePod(latest(api.LevelRestricted), &tmpl.ObjectMeta, &tmpl.Spec)); !restricted.Allowed {
			t.Errorf("%s: Pod Security restricted forbids the arrival prober: %v", d.Name, restricted.ForbiddenReasons)
		}
	}
	if len(r.statefulSets) == 0 || len(r.deployments) == 0 {
		t.Errorf("%d StatefulSets, %d Deployments rendered for the storage classes", len(r.statefulSets), len(r.deployments))
	}

	doc, err := os.ReadFile(testenv.RepoPath("docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "kubectl label namespace diskprobe pod-security.kubernetes.io/enforce=privileged"; !strings.Contains(string(doc), want) {
		t.Errorf("docs/kubernetes.md does not say %q", want)
	}
}
