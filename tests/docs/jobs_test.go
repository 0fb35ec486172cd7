package docs

import (
	"regexp"
	"strings"
	"testing"
)

// TestExampleJobsAreAppliedInTheNamespaceTheDocsUse: the Job manifests name no namespace, so
// every `kubectl apply` of them must; the README's had none while every command after it used
// -n diskprobe (NotFound).
func TestExampleJobsAreAppliedInTheNamespaceTheDocsUse(t *testing.T) {
	apply := regexp.MustCompile(`kubectl\s[^\n` + "`" + `]*apply\s[^\n` + "`" + `]*examples/kubernetes/[a-z-]+\.yaml[^\n` + "`" + `]*`)
	n := 0
	for name, doc := range userDocs(t) {
		for _, cmd := range apply.FindAllString(doc, -1) {
			n++
			if !regexp.MustCompile(`(^|\s)(-n|--namespace)[ =]\S`).MatchString(cmd) {
				t.Errorf("%s: `%s` names no namespace; the Jobs' commands use -n diskprobe", name, cmd)
			}
		}
	}
	if n == 0 {
		t.Fatal("no kubectl apply of examples/kubernetes found")
	}
	for _, f := range []string{"check-job.yaml", "cleanup-job.yaml"} {
		doc := read(t, "examples/kubernetes/"+f)
		for _, want := range []string{"pod-security.kubernetes.io/enforce=privileged", "1.29", "completions and parallelism"} {
			if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(doc, "#", "")), " "), want) {
				t.Errorf("examples/kubernetes/%s's header does not say %q (the namespace's Pod Security, the Kubernetes version, what to edit)", f, want)
			}
		}
	}
}
