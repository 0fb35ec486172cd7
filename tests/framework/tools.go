package framework

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// ToolsRequiredEnv names the environment variable that, set to "1", makes a missing pinned
// tool (Kubernetes, prometheus-operator, Prometheus 3) fail the test instead of skipping it.
// `make test` sets it when it runs as root, after `make test-deps` built the tools, so CI can
// never pass by skipping them.
const ToolsRequiredEnv = "DISKPROBE_TOOLS_REQUIRED"

var (
	toolsMu  sync.Mutex
	toolDirs = map[string]string{}
)

// ToolDir is the bin directory of a pinned tool that scripts/tools.sh builds into its
// per-machine cache (k8s, prometheus-operator, prometheus, prometheus-operator-crds). A
// tool not built yet skips the test, naming `make tools`, unless ToolsRequiredEnv is set.
func ToolDir(t testing.TB, tool string) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if dir, ok := toolDirs[tool]; ok {
		return dir
	}
	out, err := exec.Command(testenv.RepoPath("scripts", "tools.sh"), "--cached", tool).Output()
	if err != nil {
		msg := "is not built on this machine: run `make tools` (builds it once into a per-machine cache)"
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Fatalf("scripts/tools.sh --cached %s: %v", tool, err)
		}
		if os.Getenv(ToolsRequiredEnv) == "1" {
			t.Fatalf("%s %s, and %s=1 says the tests need it", tool, msg, ToolsRequiredEnv)
		}
		t.Skipf("%s %s", tool, msg)
	}
	dir := strings.TrimSpace(string(out))
	toolDirs[tool] = dir
	return dir
}

// PrometheusServer is one Prometheus release the rules, rule tests and dashboard queries are
// run on: Debian's (2.42 on Debian 12) and Prometheus 3 built by scripts/tools.sh.
type PrometheusServer struct {
	Name     string // "2.42.0", "3.16.0": the version the binary reports
	Bin      string // prometheus
	Promtool string
}

// PrometheusServers returns Debian's Prometheus and Prometheus 3, the two the project
// supports. Debian's missing skips the test (make test-deps installs it); Prometheus 3 not
// built follows ToolDir.
func PrometheusServers(t testing.TB) []PrometheusServer {
	t.Helper()
	testenv.RequireTools(t, "prometheus", "promtool")
	debian, _ := exec.LookPath("prometheus")
	debianTool, _ := exec.LookPath("promtool")
	v3 := ToolDir(t, "prometheus")
	servers := []PrometheusServer{
		{Bin: debian, Promtool: debianTool},
		{Bin: filepath.Join(v3, "prometheus"), Promtool: filepath.Join(v3, "promtool")},
	}
	for i := range servers {
		servers[i].Name = prometheusVersion(t, servers[i].Bin)
	}
	return servers
}

var versionRE = regexp.MustCompile(`version ([0-9]+\.[0-9]+\.[0-9]+)`)

func prometheusVersion(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	m := versionRE.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	return string(m[1])
}
