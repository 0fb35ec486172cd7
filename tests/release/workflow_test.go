package release

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// workflow is what the test reads of .github/workflows/release.yml.
type workflow struct {
	On struct {
		Push struct {
			Tags []string `yaml:"tags"`
		} `yaml:"push"`
	} `yaml:"on"`
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Steps []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			With map[string]string `yaml:"with"`
			Run  string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func readWorkflow(t *testing.T) (workflow, []string) {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath(".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	// yaml.v3: YAML 1.2, where the key on is a string (YAML 1.1 would read true).
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, job := range w.Jobs {
		for _, s := range job.Steps {
			if s.Run != "" {
				// One command per line: continuation lines joined.
				runs = append(runs, strings.Split(strings.ReplaceAll(s.Run, "\\\n", " "), "\n")...)
			}
		}
	}
	return w, runs
}

// TestReleaseWorkflowRunsWhatTheMakefileWrites: the release workflow, on a tag v*, runs make
// targets that exist, and pushes and uploads the files make release writes under the names
// it writes them (at a release tag, where both versions are VERSION), to the places the chart
// and docs name.
func TestReleaseWorkflowRunsWhatTheMakefileWrites(t *testing.T) {
	w, runs := readWorkflow(t)
	if len(w.On.Push.Tags) != 1 || w.On.Push.Tags[0] != "v*" {
		t.Errorf("the workflow runs on tags %v, want v*", w.On.Push.Tags)
	}
	goVersion := ""
	for _, job := range w.Jobs {
		for _, s := range job.Steps {
			if strings.HasPrefix(s.Uses, "actions/setup-go@") {
				goVersion = s.With["go-version"]
			}
		}
	}
	if goVersion != "1.26" {
		t.Errorf("setup-go go-version %q, want 1.26 (go.mod's)", goVersion)
	}

	makefile, err := os.ReadFile(testenv.RepoPath("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	makeVar := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\s*\?=\s*(\S+)\s*$`).FindSubmatch(makefile)
		if m == nil {
			t.Fatalf("Makefile sets no %s ?=", name)
		}
		return string(m[1])
	}
	if w.Env["DIST"] != makeVar("RELEASE_DIST") {
		t.Errorf("the workflow's DIST %q, make release writes into %q", w.Env["DIST"], makeVar("RELEASE_DIST"))
	}
	if w.Env["IMAGE"] != makeVar("IMAGE") || w.Env["IMAGE"] != image {
		t.Errorf("the workflow pushes to %q; the Makefile's IMAGE is %q, the chart's image %q", w.Env["IMAGE"], makeVar("IMAGE"), image)
	}
	if want := w.Env["CHART_URL_BASE"] + "/v$(SEMVER)"; makeVar("CHART_URL") != want {
		t.Errorf("index.yaml's chart URL: Makefile %q, the workflow's %q", makeVar("CHART_URL"), want)
	}
	if w.Env["CHART_REPO"] != "oci://ghcr.io/diskprobe/charts" {
		t.Errorf("CHART_REPO %q", w.Env["CHART_REPO"])
	}

	// make targets.
	var targets []string
	for _, r := range runs {
		for _, m := range regexp.MustCompile(`(?:^|[;&|]\s*)make\s+([a-z][a-z0-9-]*)`).FindAllStringSubmatch(strings.TrimSpace(r), -1) {
			targets = append(targets, m[1])
		}
	}
	if len(targets) == 0 || !contains(targets, "release") {
		t.Errorf("the workflow runs make targets %v, want make release", targets)
	}
	// Not make -n: it runs every recipe line holding $(MAKE), which make release's do.
	phony := regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindSubmatch(makefile)
	for _, target := range targets {
		if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(target)+`:`).Match(makefile) || phony == nil || !contains(strings.Fields(string(phony[1])), target) {
			t.Errorf("the workflow runs make %s, which is no .PHONY target of the Makefile", target)
		}
	}

	// Files pushed and uploaded, named as make release names them at a release tag.
	const v = "9.8.7"
	want := artifacts(v, v)
	expand := func(s string) string {
		s = strings.ReplaceAll(s, `"`, "")
		for _, k := range []string{"DIST", "VERSION", "IMAGE"} {
			val := w.Env[k]
			if k == "VERSION" {
				val = v
			}
			s = strings.ReplaceAll(strings.ReplaceAll(s, "${"+k+"}", val), "$"+k, val)
		}
		return s
	}
	inDist := func(arg string) (string, bool) {
		return strings.CutPrefix(expand(arg), w.Env["DIST"]+"/")
	}
	var uploads, pushed []string
	for _, r := range runs {
		fields := strings.Fields(r)
		switch {
		case len(fields) > 3 && fields[0] == "gh" && fields[1] == "release" && fields[2] == "create":
			for _, f := range fields[3:] {
				if p, ok := inDist(f); ok {
					uploads = append(uploads, p)
				}
			}
		case len(fields) > 4 && fields[0] == "skopeo" && fields[1] == "copy":
			archive, ok := strings.CutPrefix(expand(fields[3]), "oci-archive:")
			if p, in := strings.CutPrefix(archive, w.Env["DIST"]+"/"); ok && in {
				pushed = append(pushed, p)
			}
			if got := expand(fields[4]); got != "docker://"+image+":"+v {
				t.Errorf("skopeo copy pushes to %s, want docker://%s:%s", got, image, v)
			}
		case len(fields) > 3 && strings.HasSuffix(fields[0], "helm") && fields[1] == "push":
			if p, ok := inDist(fields[2]); ok {
				pushed = append(pushed, p)
			}
		}
	}
	for _, p := range pushed {
		if !contains(want, p) {
			t.Errorf("the workflow pushes %s, which make release does not write (it writes %v)", p, want)
		}
	}
	if len(pushed) != 2 {
		t.Errorf("the workflow pushes %v, want the image archive and the chart", pushed)
	}
	for _, pattern := range uploads {
		n := 0
		for _, a := range want {
			if ok, _ := path.Match(pattern, a); ok {
				n++
			}
		}
		if n == 0 {
			t.Errorf("the workflow uploads %s, which matches nothing make release writes", pattern)
		}
	}
	for _, a := range want {
		matched := false
		for _, pattern := range uploads {
			if ok, _ := path.Match(pattern, a); ok {
				matched = true
			}
		}
		if !matched {
			t.Errorf("make release writes %s, which the workflow does not upload (uploads %v)", a, uploads)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
