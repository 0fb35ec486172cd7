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
	doc, err := os.ReadFile(testenv.RepoPath("docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "kubectl label namespace diskprobe pod-security.kubernetes.io/enforce=privileged"; !strings.Contains(string(doc), want) {
		t.Errorf("docs/kubernetes.md does not say %q", want)
	}
}
