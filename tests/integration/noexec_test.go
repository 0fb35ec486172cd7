package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestDaemonNeverShellsOut: a prober that runs as a privileged daemon on every storage
// host must not run other programs. `make lint` refuses os/exec and the process-starting
// calls in the daemon's own packages (depguard and forbidigo, .golangci.yml); this checks
// that no dependency links os/exec into the binary either.
func TestDaemonNeverShellsOut(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/diskprobe_exporter")
	cmd.Dir = testenv.RepoPath()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if p == "os/exec" {
			t.Errorf("os/exec is linked into the daemon through a dependency")
		}
	}
	if len(deps) < 50 {
		t.Fatalf("only %d packages listed for the daemon: wrong directory?", len(deps))
	}
	t.Logf("%d packages linked, none of them os/exec", len(deps))
}
