package charts

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// release is the file VERSION: the next release, which the chart, the image and the packages
// are numbered after.
func release(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath("VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Fatalf("VERSION holds %q, not a release X.Y.Z", v)
	}
	return v
}

// makeDryRun prints the commands `make TARGET` would run in the repository root.
func makeDryRun(t *testing.T, target string) string {
	t.Helper()
	testenv.RequireTools(t, "make", "git")
	out, err := exec.Command("make", "-C", testenv.RepoPath(), "-n", "--no-print-directory", target).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// publishedImage is where the release workflow pushes the image and what the chart pulls.
const publishedImage = "ghcr.io/diskprobe/diskprobe-exporter"

// TestHelmInstallWithoutImageTagGetsTheImageMakeImageTags: `helm install` with no --set
// image.tag pulls <repository>:<appVersion>; that must be the published image under the tag
// `make image` gives a release, and the chart's version, appVersion and VERSION one number, or
// a new user gets ImagePullBackOff. A development build is never tagged with the release.
func TestHelmInstallWithoutImageTagGetsTheImageMakeImageTags(t *testing.T) {
	v := release(t)
	data, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := sigsyaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != v || chart.AppVersion != v {
		t.Errorf("Chart.yaml has version %q and appVersion %q, VERSION %q: one number for all three", chart.Version, chart.AppVersion, v)
	}
	out, err := exec.Command("sh", testenv.RepoPath("packaging", "version.sh"), "--semver").Output()
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.TrimSpace(string(out))
	if want := "-t '" + publishedImage + ":" + tag + "'"; !strings.Contains(makeDryRun(t, "image"), want) {
		t.Errorf("make image does not tag the image %s (packaging/version.sh --semver) (want %s in make -n image)", tag, want)
	}
	exact := exec.Command("git", "-C", testenv.RepoPath(), "describe", "--tags", "--exact-match", "--match", "v"+v, "--dirty")
	if desc, err := exact.Output(); err != nil || strings.TrimSpace(string(desc)) != "v"+v {
		if tag == v {
			t.Errorf("make image tags %s on a checkout that is not the release tag v%s (git describe: %q)", tag, v, desc)
		}
	}
	r := render(t, "probe", nil, nil)
	if got, want := r.daemonSet.Spec.Template.Spec.Containers[0].Image, publishedImage+":"+v; got != want {
		t.Errorf("the DaemonSet's default image is %s, want %s (what the release publishes)", got, want)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	r = render(t, "probe", nil, []string{"image.digest=" + digest, "image.tag=9.9.9"})
	if got, want := r.daemonSet.Spec.Template.Spec.Containers[0].Image, publishedImage+"@"+digest; got != want {
		t.Errorf("with image.digest the DaemonSet's image is %s, want %s", got, want)
	}

	// The install commands of README.md and docs/kubernetes.md name the image and its archive
	// by the release.
	for _, doc := range []string{"README.md", "docs/kubernetes.md"} {
		text, err := os.ReadFile(testenv.RepoPath(doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`diskprobe-exporter[:-]([0-9]+\.[0-9]+\.[0-9]+)\b`).FindAllSubmatch(text, -1) {
			if string(m[1]) != v {
				t.Errorf("%s names %s, but the release (VERSION) is %s", doc, m[0], v)
			}
		}
	}

	// The example Jobs run the image the chart runs by default.
	for _, file := range []string{"check-job.yaml", "cleanup-job.yaml"} {
		job, err := os.ReadFile(testenv.RepoPath("examples", "kubernetes", file))
		if err != nil {
			t.Fatal(err)
		}
		var j batchv1.Job
		if err := sigsyaml.Unmarshal(job, &j); err != nil {
			t.Fatal(err)
		}
		if got, want := j.Spec.Template.Spec.Containers[0].Image, publishedImage+":"+v; got != want {
			t.Errorf("examples/kubernetes/%s runs %s, want %s (the chart's default image)", file, got, want)
		}
	}
}

// TestBinaryAndPackagesCarryTheReleaseVersion: `make build` and `make package` stamp the
// binary (--version, diskprobe_exporter_build_info) and the packages with packaging/version.sh's
// version, which is VERSION's release at its tag and VERSION~dev.<n>.g<sha> before it.
func TestBinaryAndPackagesCarryTheReleaseVersion(t *testing.T) {
	v := release(t)
	out, err := exec.Command("sh", testenv.RepoPath("packaging", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	pkg := strings.TrimSpace(string(out))
	if pkg != v && !strings.HasPrefix(pkg, v+"~") && !strings.HasPrefix(pkg, v+"+") {
		t.Errorf("packaging/version.sh prints %q, not VERSION %s or a build of it", pkg, v)
	}
	if want := "version.Version=" + pkg + " "; !strings.Contains(makeDryRun(t, "build"), want) {
		t.Errorf("make build does not stamp the binary with %s", want)
	}
	if want := "PACKAGE_VERSION='" + pkg + "'"; !strings.Contains(makeDryRun(t, "package"), want) {
		t.Errorf("make package does not number the packages %s", want)
	}
}
