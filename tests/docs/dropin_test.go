package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestReadmeDropInIsOneSystemdReadsForTheProbeDirectory runs the README's non-interactive
// drop-in commands as written, /etc/systemd/system moved into a temporary directory, and has
// systemd parse the package's unit with the file they make (systemd-analyze verify, which
// names a drop-in it cannot read and every unknown key): the drop-in must be for that unit,
// say ReadWritePaths= of the probe_dir the README's configuration uses, and be read.
func TestReadmeDropInIsOneSystemdReadsForTheProbeDirectory(t *testing.T) {
	readme := read(t, "README.md")
	var cmds []string
	for _, b := range codeBlocks(readme, "sh") {
		if strings.Contains(b, "ReadWritePaths=") {
			cmds = strings.Split(strings.TrimSpace(b), "\n")
			break
		}
	}
	if cmds == nil {
		t.Fatal("README.md has no shell block that writes a ReadWritePaths= drop-in")
	}
	units, _ := filepath.Glob(testenv.RepoPath("systemd", "*.service"))
	if len(units) != 1 {
		t.Fatalf("systemd/ holds %v; the test expects the package's one service", units)
	}
	unit := filepath.Base(units[0])
	root := t.TempDir()
	etc := filepath.Join(root, "etc/systemd/system")
	var script []string
	for _, c := range cmds {
		switch {
		case strings.Contains(c, "systemctl") || strings.HasPrefix(c, "sudo install "):
			continue // the daemon-reload, and the probe directory with its owner
		case !strings.Contains(c, "/etc/systemd/system/"):
			t.Fatalf("README.md's drop-in block runs %q, which the test does not know", c)
		}
		if !strings.Contains(c, "/etc/systemd/system/"+unit+".d") {
			t.Errorf("README.md's drop-in %q is not for the package's unit %s", c, unit)
		}
		c = strings.ReplaceAll(c, "sudo ", "")
		script = append(script, strings.ReplaceAll(c, "/etc/systemd/system/", etc+"/"))
	}
	if out, err := exec.Command("sh", "-ec", strings.Join(script, "\n")).CombinedOutput(); err != nil {
		t.Fatalf("README.md's drop-in commands: %v\n%s", err, out)
	}
	dropins, _ := filepath.Glob(filepath.Join(etc, unit+".d", "*.conf"))
	if len(dropins) != 1 {
		t.Fatalf("README.md's commands made %v, want one .conf drop-in", dropins)
	}
	data, err := os.ReadFile(dropins[0])
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ReadWritePaths=(\S+)$`).FindStringSubmatch(string(data))
	if m == nil || !strings.HasPrefix(string(data), "[Service]\n") {
		t.Fatalf("the drop-in is not a [Service] section with ReadWritePaths=:\n%s", data)
	}
	probeDir := regexp.MustCompile(`(?m)^\s+probe_dir: (\S+)`).FindStringSubmatch(readme)
	if probeDir == nil || probeDir[1] != m[1] {
		t.Errorf("the drop-in makes %s writable; the README's target has probe_dir %v", m[1], probeDir)
	}
	if !strings.Contains(readme, "install -d -o diskprobe -g diskprobe -m 0700 "+m[1]) {
		t.Errorf("the README does not create %s for the service's user before the drop-in", m[1])
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze not found: install the test dependencies with scripts/ensure-deps.sh")
	}
	// verify reads the unit and the drop-ins beside it, naming a drop-in with a line it does
	// not take; it also complains that the binary and the man page are not installed here,
	// which is not what this test is about. A canary drop-in with a misspelt key shows that
	// the drop-ins of this directory are read at all.
	data, err = os.ReadFile(units[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, unit), data, 0o644); err != nil {
		t.Fatal(err)
	}
	verify := func() string {
		cmd := exec.Command("systemd-analyze", "verify", "--man=no", filepath.Join(etc, unit))
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+etc+":")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	for _, l := range strings.Split(verify(), "\n") {
		if strings.Contains(l, unit+".d/") {
			t.Errorf("systemd on the README's drop-in: %s", l)
		}
	}
	canary := filepath.Join(etc, unit+".d", "zz-canary.conf")
	if err := os.WriteFile(canary, []byte("[Service]\nReadWritePathz=/nowhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := verify(); !strings.Contains(out, "zz-canary.conf") {
		t.Errorf("systemd-analyze verify does not read the drop-ins of %s (a misspelt key went unnoticed):\n%s", etc, out)
	}
}
