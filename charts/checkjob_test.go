package charts

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestCheckJobExampleDecodesAndItsArgumentsParse decodes examples/kubernetes/check-job.yaml
// strictly into a batch/v1 Job and runs its arguments through the real binary's parser
// (with --help appended, so that nothing is measured): a misspelt flag fails here, not in
// a user's cluster.
func TestCheckJobExampleDecodesAndItsArgumentsParse(t *testing.T) {
	data, err := os.ReadFile("../examples/kubernetes/check-job.yaml")
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
