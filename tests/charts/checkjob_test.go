package charts

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/jsonpath"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestNodeJobExamplesRunOncePerControlPlaneNode decodes examples/kubernetes/check-job.yaml and
// cleanup-job.yaml strictly into batch/v1 Jobs: each is one command for every node it must
// visit (an Indexed Job whose pods repel each other by node name), keeps the chart's least
// privilege, runs the image the chart runs by default, and its arguments pass the real
// binary's parser (with --help appended, so that nothing is measured or removed): a misspelt
// flag fails here, not in a user's cluster. The check Job runs where the etcd preset runs,
// tolerating what it tolerates. The cleanup Job runs on every node and names every directory
// the chart's installs create on a node: it visited only the control-plane nodes and only the
// etcd preset's directory, and succeeded while the default install's files stayed on the
// workers.
func TestNodeJobExamplesRunOncePerControlPlaneNode(t *testing.T) {
	preset := render(t, "probe", []string{chartDir + "/values-etcd.yaml"}, nil).daemonSet.Spec.Template.Spec
	defaults := render(t, "probe", nil, nil).daemonSet.Spec.Template.Spec
	image := defaults.Containers[0].Image
	var probeDirs []string // the directories the kubelet creates for the pods' probe files
	for _, spec := range []corev1.PodSpec{defaults, preset} {
		for _, v := range spec.Volumes {
			if v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate {
				probeDirs = append(probeDirs, v.HostPath.Path)
			}
		}
	}
	if len(probeDirs) < 2 {
		t.Fatalf("the chart's default install and etcd preset create %v on the nodes; want a directory each", probeDirs)
	}
	for _, c := range []struct{ file, command string }{{"check-job.yaml", "check"}, {"cleanup-job.yaml", "cleanup"}} {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(testenv.RepoPath("examples", "kubernetes", c.file))
			if err != nil {
				t.Fatal(err)
			}
			var job batchv1.Job
			if err := sigsyaml.UnmarshalStrict(data, &job); err != nil {
				t.Fatalf("%s does not decode strictly into a batch/v1 Job: %v", c.file, err)
			}
			s := job.Spec
			if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism {
				t.Errorf("want an Indexed Job with as many pods at once as completions (one per node)")
			}
			if s.BackoffLimitPerIndex == nil || s.BackoffLimit != nil {
				t.Error("one node's failure must not end the other nodes' pods: backoffLimitPerIndex, not backoffLimit")
			}
			pod := s.Template.Spec
			anti := pod.Affinity.PodAntiAffinity
			if anti == nil || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || anti.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
				t.Fatalf("the pods do not repel each other by node name: %+v", anti)
			}
			sel := anti.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels
			for k, v := range sel {
				if s.Template.Labels[k] != v {
					t.Errorf("the anti-affinity selects %v, not the Job's own pods %v", sel, s.Template.Labels)
				}
			}
			ctr := pod.Containers[0]
			if c.command == "cleanup" {
				if pod.Affinity.NodeAffinity != nil {
					t.Errorf("node affinity %+v: the cleanup Job must visit every node, the default install's too", pod.Affinity.NodeAffinity)
				}
				if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" || pod.Tolerations[0].Effect != "" {
					t.Errorf("tolerations %+v: want every taint tolerated, to reach every node", pod.Tolerations)
				}
				for _, dir := range probeDirs {
					// A target's <path>/.diskprobe, mounted writable on its own over the
					// read-only path, is cleaned by cleaning path: cleanup DIR removes
					// DIR/.diskprobe.
					if filepath.Base(dir) == ".diskprobe" {
						dir = filepath.Dir(dir)
					}
					if !slices.Contains(ctr.Args, dir) {
						t.Errorf("arguments %v: %s, which the chart creates on its nodes, is not cleaned", ctr.Args, dir)
					}
				}
			} else {
				got, _ := json.Marshal(pod.Affinity.NodeAffinity)
				want, _ := json.Marshal(preset.Affinity.NodeAffinity)
				if string(got) != string(want) {
					t.Errorf("node affinity %s, want the etcd preset's %s", got, want)
				}
				got, _ = json.Marshal(pod.Tolerations)
				want, _ = json.Marshal(preset.Tolerations)
				if string(got) != string(want) {
					t.Errorf("tolerations %s, want the etcd preset's %s", got, want)
				}
			}
			if ctr.Image != image {
				t.Errorf("runs %s; the chart's default image is %s", ctr.Image, image)
			}
			sc := ctr.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || len(sc.Capabilities.Add) != 0 {
				t.Errorf("the Job must keep the chart's least privilege (root, no capabilities, read-only root): %+v", sc)
			}
			for _, m := range ctr.VolumeMounts {
				if m.MountPath == "/var/lib/etcd" && !m.ReadOnly {
					t.Error("/var/lib/etcd must be mounted read-only")
				}
			}
			args := append(append([]string{}, ctr.Args...), "--help")
			out, err := exec.Command(testenv.Binary(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("diskprobe_exporter %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if !strings.Contains(string(out), "usage: diskprobe_exporter "+c.command) {
				t.Errorf("the Job's arguments do not reach the %s command:\n%s", c.command, out)
			}
		})
	}
}

// jobStatuses are a check Job's status as the Kubernetes 1.34 Job controller writes it
// (pkg/controller/job: conditions appended, the interim one first): still running, passed
// (exit 0 on every node) and failed (exit 1 on a node, backoffLimitPerIndex 0).
var jobStatuses = map[string]string{
	"running": `{"active": 2, "ready": 2, "succeeded": 1, "completedIndexes": "0"}`,
	"PASS": `{"succeeded": 3, "ready": 0, "completedIndexes": "0-2", "completionTime": "2026-11-24T08:00:00Z", "conditions": [
		{"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
		{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}`,
	"FAIL": `{"succeeded": 2, "failed": 1, "ready": 0, "completedIndexes": "0,2", "failedIndexes": "1", "conditions": [
		{"type": "FailureTarget", "status": "True", "reason": "FailedIndexes"},
		{"type": "Failed", "status": "True", "reason": "FailedIndexes"}]}`,
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
