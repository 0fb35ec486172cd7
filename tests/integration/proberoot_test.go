package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestConfigCheckRefusesWhatTheDaemonWouldRefuse: --config.check passed a symlinked or
// another user's .diskprobe and a world-writable probe root, which the daemon then
// refused at every round. It names each, with file, line, field and the fix; a root with
// the sticky bit (as /tmp has) and a safe one pass.
func TestConfigCheckRefusesWhatTheDaemonWouldRefuse(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	dirs := map[string]string{}
	for _, name := range []string{"open", "sticky", "groupw", "foreign_owner", "dirlink", "dirowner", "safe", "elsewhere"} {
		dirs[name] = filepath.Join(base, name)
		if err := os.Mkdir(dirs[name], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	chmod := func(name string, mode os.FileMode) {
		if err := os.Chmod(dirs[name], mode); err != nil {
			t.Fatal(err)
		}
	}
	chmod("open", 0o777)
	chmod("sticky", os.ModeSticky|0o777)
	chmod("groupw", 0o775)
	if err := os.Chown(dirs["foreign_owner"], 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dirs["elsewhere"], filepath.Join(dirs["dirlink"], ".diskprobe")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dirs["dirowner"], ".diskprobe"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dirs["dirowner"], ".diskprobe"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	cfg.WriteString("targets:\n")
	order := []string{"open", "sticky", "groupw", "foreign_owner", "dirlink", "dirowner", "safe"}
	for _, name := range order {
		fmt.Fprintf(&cfg, "  - name: %s\n    path: %s\n    fsync: {}\n", name, dirs[name])
	}
	file := framework.WriteConfig(t, cfg.String())
	code, stdout, stderr := configCheck(t, file)
	if code != 1 {
		t.Fatalf("--config.check: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	line := func(name string) int {
		for i, n := range order {
			if n == name {
				return 3 + 3*i
			}
		}
		return 0
	}
	for name, want := range map[string]string{
		"open":          "others can write it (mode 0777) and it has no sticky bit, so they could swap the probe directory; chmod go-w " + dirs["open"],
		"groupw":        "its group can write it (mode 0775)",
		"foreign_owner": "it is owned by uid 65534, neither the exporter's (uid 0) nor root",
		"dirlink":       filepath.Join(dirs["dirlink"], ".diskprobe") + ": it is a symlink",
		"dirowner":      filepath.Join(dirs["dirowner"], ".diskprobe") + ": it is owned by uid 65534",
	} {
		i := line(name)
		prefix := fmt.Sprintf("%s:%d: targets[%d].path: ", filepath.Base(file), i, (i-3)/3)
		found := false
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, prefix) && strings.Contains(l, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no line with %q and %q in:\n%s", name, prefix, want, stderr)
		}
	}
	for _, name := range []string{"sticky", "safe"} {
		if strings.Contains(stderr, fmt.Sprintf("targets[%d]", (line(name)-3)/3)) {
			t.Errorf("%s was refused:\n%s", name, stderr)
		}
	}
	if entries, _ := os.ReadDir(dirs["elsewhere"]); len(entries) != 0 {
		t.Errorf("--config.check wrote through the symlink: %v", entries)
	}
}
