package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// shell runs documented commands as a user would type them: bash in dir, with kubectl and
// helm on PATH and KUBECONFIG naming the cluster's admin.
type shell struct {
	e   *env
	dir string
}

func (e *env) shell(t *testing.T) *shell {
	return &shell{e: e, dir: t.TempDir()}
}

// run runs one command line and returns its combined output; a failure fails t.
func (s *shell) run(t *testing.T, line string) string {
	t.Helper()
	out, err := s.try(line)
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return out
}

// try runs one command line and returns its combined output and error.
func (s *shell) try(line string) (string, error) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.e.c.Kubeconfig,
		"PATH="+s.e.c.BinDir+":"+filepath.Dir(s.e.helm)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// readmeInstall is the shell block of README.md that holds `helm install`, one command a line
// (continuations joined).
func readmeInstall(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "../../README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.Contains(m[1], "helm install") {
			return commandLines(m[1])
		}
	}
	t.Fatal("README.md has no shell block with helm install")
	return nil
}

// commandLines splits shell text into commands, joining lines continued with a backslash and
// leaving out comments and blank lines.
func commandLines(text string) []string {
	var cmds []string
	var cur strings.Builder
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\"))
			continue
		}
		cur.WriteString(l)
		cmds = append(cmds, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	return cmds
}

// pullChart does what `helm pull oci://…/diskprobe-exporter --version V --untar` does in the
// shell's directory, from this checkout: the chart as `helm package` publishes it, unpacked.
func (s *shell) pullChart(t *testing.T, line string) {
	t.Helper()
	f := strings.Fields(line)
	version := ""
	for i, a := range f {
		if a == "--version" && i+1 < len(f) {
			version = f[i+1]
		}
	}
	if want := chartVersion(t); version != want {
		t.Errorf("%q pulls version %q, the chart is %s", line, version, want)
	}
	if !strings.Contains(line, "--untar") || !strings.HasPrefix(f[2], "oci://") {
		t.Fatalf("%q: want helm pull oci://… --untar", line)
	}
	pkg := t.TempDir()
	out, err := exec.Command(s.e.helm, "package", chartDir, "-d", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	archives, _ := filepath.Glob(filepath.Join(pkg, "*.tgz"))
	if len(archives) != 1 {
		t.Fatalf("helm package wrote %v", archives)
	}
	testenv.Run(t, "tar", "-xzf", archives[0], "-C", s.dir)
}

// exampleJob is an example Job of examples/kubernetes, its image set to the one imported into
// the nodes (as a user sets it to their registry's), written where the example's own
// commands find it from the shell's directory; it returns the Job and the commands of its
// comment.
func (s *shell) exampleJob(t *testing.T, name string) (batchv1.Job, []string) {
	t.Helper()
	src := filepath.Join(chartDir, "../../examples/kubernetes", name)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := sigsyaml.UnmarshalStrict(data, &job); err != nil {
		t.Fatal(err)
	}
	c := &job.Spec.Template.Spec.Containers[0]
	if def := defaultImage(t, s.e); c.Image != def {
		t.Errorf("%s runs %s; the chart's default image is %s", name, c.Image, def)
	}
	c.Image = s.e.image
	manifest, err := sigsyaml.Marshal(&job)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(s.dir, "examples/kubernetes", name)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^#\s+(kubectl .*)$`).FindAllStringSubmatch(string(data), -1) {
		cmds = append(cmds, strings.TrimSpace(m[1]))
	}
	if len(cmds) == 0 {
		t.Fatalf("%s names no kubectl command", name)
	}
	return job, cmds
}

// defaultImage is the image the chart's DaemonSet runs with its default values.
func defaultImage(t *testing.T, e *env) string {
	t.Helper()
	out, err := exec.Command(e.helm, "template", "probe", chartDir, "--show-only", "templates/daemonset.yaml").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+image: "?([^"\s]+)"?$`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatal("the DaemonSet names no image")
	}
	return m[1]
}
