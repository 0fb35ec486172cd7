package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// HelmVersion is the helm the chart tests run, built once from its module (no download of a
// prebuilt binary).
const HelmVersion = "v3.19.0"

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// Helm builds helm once per machine into the user cache directory and returns its path.
func Helm(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			helmErr = err
			return
		}
		dir := filepath.Join(cache, "diskprobe_exporter", "helm-"+HelmVersion)
		helmBin = filepath.Join(dir, "helm")
		if _, err := os.Stat(helmBin); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+HelmVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("go install helm %s: %v\n%s", HelmVersion, err, out)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmBin
}
