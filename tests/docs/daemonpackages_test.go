package docs

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// daemonPackages are the daemon's packages as scripts/daemon-packages.sh prints them,
// without the leading "./": the one list make test-race, make lint's guards, development.md
// and the comment check read.
func daemonPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(testenv.RepoPath("scripts/daemon-packages.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/daemon-packages.sh: %v", err)
	}
	var pkgs []string
	for _, l := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(l, "./"))
	}
	if len(pkgs) < 5 || !slices.Contains(pkgs, "probe") || slices.Contains(pkgs, "internal/testenv") {
		t.Fatalf("scripts/daemon-packages.sh printed %v: want the binary's packages, and not internal/testenv", pkgs)
	}
	return pkgs
}

// TestEveryDaemonPackageIsUnderTheGuards: a package the binary links but that make lint's
// guards do not name could start a program or exit the daemon unseen; a package the race
// tier does not list is never run under the race detector. inspect/ and internal/answer
// were both missing from all three.
func TestEveryDaemonPackageIsUnderTheGuards(t *testing.T) {
	pkgs := daemonPackages(t)

	var lint struct {
		Linters struct {
			Settings struct {
				Depguard struct {
					Rules map[string]struct {
						Files []string `yaml:"files"`
					} `yaml:"rules"`
				} `yaml:"depguard"`
			} `yaml:"settings"`
			Exclusions struct {
				Rules []struct {
					Linters    []string `yaml:"linters"`
					PathExcept string   `yaml:"path-except"`
				} `yaml:"rules"`
			} `yaml:"exclusions"`
		} `yaml:"linters"`
	}
	if err := yaml.Unmarshal([]byte(read(t, ".golangci.yml")), &lint); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range pkgs {
		want = append(want, "**/"+p+"/*.go")
	}
	var files []string
	for _, f := range lint.Linters.Settings.Depguard.Rules["daemon-never-shells-out"].Files {
		if !strings.HasPrefix(f, "!") {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	if !slices.Equal(files, want) {
		t.Errorf(".golangci.yml: depguard's daemon-never-shells-out files are\n  %v\nwant the daemon's packages (scripts/daemon-packages.sh)\n  %v", files, want)
	}
	var except *regexp.Regexp
	for _, r := range lint.Linters.Exclusions.Rules {
		if slices.Equal(r.Linters, []string{"forbidigo"}) && r.PathExcept != "" {
			except = regexp.MustCompile(r.PathExcept)
		}
	}
	if except == nil {
		t.Fatal(".golangci.yml: no forbidigo exclusion with a path-except naming the daemon's packages")
	}
	for _, p := range pkgs {
		if !except.MatchString(p + "/x.go") {
			t.Errorf(".golangci.yml: forbidigo's path-except %q leaves out the daemon's package %s", except, p)
		}
	}
	for _, p := range []string{"internal/testenv/x.go", "tests/framework/x.go"} {
		if except.MatchString(p) {
			t.Errorf(".golangci.yml: forbidigo's path-except %q takes %s, which may start programs", except, p)
		}
	}

	if !regexp.MustCompile(`(?m)^RACE_PKGS \?= \$\(DAEMON_PKGS\)$`).MatchString(read(t, "Makefile")) {
		t.Error("Makefile: RACE_PKGS is not $(DAEMON_PKGS), the daemon's packages")
	}

	layout := strings.SplitN(read(t, "docs/development.md"), "\n- ", 3)[1]
	for _, p := range pkgs {
		if !strings.Contains(layout, "`"+p+"/`") {
			t.Errorf("docs/development.md: its first bullet does not describe the daemon's package `%s/`", p)
		}
	}
}
