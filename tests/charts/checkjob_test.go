package charts

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/util/jsonpath"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestCheckJobExampleDecodesAndItsArgumentsParse decodes examples/kubernetes/check-job.yaml
// strictly into a batch/v1 Job and runs its arguments through the real binary's parser
// (with --help appended, so that nothing is measured): a misspelt flag fails here, not in
// a user's cluster.
func TestCheckJobExampleDecodesAndItsArgumentsParse(t *testing.T) {
	data, err := os.ReadFile(testenv.RepoPath("examples", "kubernetes", "check-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := sigsyaml.UnmarshalStrict(data, &job); err != nil {
		t.Fatalf("check-job.yaml does not decode strictly into a batch/v1 Job: %v", err)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Error("a check must run once: backoffLimit 0")
	}
	c := job.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("the Job must keep the chart's least privilege: %+v", sc)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/var/lib/etcd" && !m.ReadOnly {
			t.Error("/var/lib/etcd must be mounted read-only")
		}
	}
	args := append(append([]string{}, c.Args...), "--help")
	out, err := exec.Command(testenv.Binary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("diskprobe_exporter %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), "usage: diskprobe_exporter check") {
		t.Errorf("the Job's arguments do not reach the check command:\n%s", out)
	}
}

// jobStatuses are a check Job's status as the Kubernetes 1.34 Job controller writes it
// (pkg/controller/job: conditions appended, the interim one first): still running, passed
// (exit 0) and failed (exit 1, backoffLimit 0).
var jobStatuses = map[string]string{
	"running": `{"active": 1, "ready": 1}`,
	"PASS": `{"succeeded": 1, "ready": 0, "completionTime": "2026-11-24T08:00:00Z", "conditions": [
		{"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
		{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}`,
	"FAIL": `{"failed": 1, "ready": 0, "conditions": [
		{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
		{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}`,
}

// TestCheckJobDocumentedWaitEndsOnFailToo evaluates the `kubectl wait --for=…` of
// check-job.yaml's instructions the way kubectl 1.34 does (pkg/cmd/wait: condition= matches a
// condition of that type whose status is True, case-insensitively; jsonpath= with client-go's
// jsonpath, missing keys allowed, exactly one value, compared as text) on the Job's status when
// running, passed and failed: it must end on PASS and on FAIL, not while running.
func TestCheckJobDocumentedWaitEndsOnFailToo(t *testing.T) {
	data, err := os.ReadFile(testenv.RepoPath("examples", "kubernetes", "check-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#\s+kubectl .*\bwait --for=(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("check-job.yaml's instructions have no kubectl wait --for=")
	}
	forArg := strings.NewReplacer("'", "").Replace(string(m[1])) // the shell's quotes
	for state, status := range jobStatuses {
		var obj map[string]any
		if err := json.Unmarshal([]byte(`{"kind": "Job", "status": `+status+`}`), &obj); err != nil {
			t.Fatal(err)
		}
		done, err := kubectlWaitMet(forArg, obj)
		if err != nil {
			t.Fatalf("--for=%s on a %s Job: %v", forArg, state, err)
		}
		if want := state != "running"; done != want {
			t.Errorf("kubectl wait --for=%s on a %s Job: ends %v, want %v", forArg, state, done, want)
		}
	}
}

// kubectlWaitMet is kubectl wait's test of one object for --for=condition=… and
// --for=jsonpath=… (k8s.io/kubectl v0.34 pkg/cmd/wait).
func kubectlWaitMet(forArg string, obj map[string]any) (bool, error) {
	if cond, ok := strings.CutPrefix(forArg, "condition="); ok {
		name, value, found := strings.Cut(cond, "=")
		if !found {
			value = "true"
		}
		status, _ := obj["status"].(map[string]any)
		conditions, _ := status["conditions"].([]any)
		for _, c := range conditions {
			c, _ := c.(map[string]any)
			if strings.EqualFold(fmt.Sprint(c["type"]), name) {
				return strings.EqualFold(fmt.Sprint(c["status"]), value), nil
			}
		}
		return false, nil
	}
	expr, ok := strings.CutPrefix(forArg, "jsonpath=")
	if !ok {
		return false, fmt.Errorf("--for=%s: neither condition= nor jsonpath=", forArg)
	}
	expr, value, matchValue := strings.Cut(expr, "}=")
	expr += "}"
	j := jsonpath.New("wait").AllowMissingKeys(true)
	if err := j.Parse(expr); err != nil {
		return false, err
	}
	results, err := j.FindResults(obj)
	if err != nil {
		return false, err
	}
	if len(results) == 0 || len(results[0]) == 0 {
		return false, nil
	}
	if len(results) > 1 || len(results[0]) > 1 {
		return false, fmt.Errorf("%s matches more than one value, which kubectl wait refuses", expr)
	}
	if !matchValue {
		return true, nil
	}
	return strings.TrimSpace(fmt.Sprint(results[0][0].Interface())) == strings.TrimSpace(value), nil
}
