package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// What forgetting the ReadWritePaths= drop-in does: the unit's ProtectSystem=strict
// mounts the probe directory read-only for the exporter. --config.check passed it, and
// the daemon then failed every round. It is refused at load now, naming the drop-in.
func TestConfigCheckRefusesAProbeDirOnAReadOnlyMount(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	data := filepath.Join(base, "data")
	ro := filepath.Join(base, "ro")
	for _, d := range []string{data, filepath.Join(data, "etcd"), filepath.Join(data, "probes"), ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A read-only view of the same filesystem, as systemd's ProtectSystem=strict gives one.
	testenv.BindMount(t, data, ro)
	testenv.Run(t, "mount", "-o", "remount,bind,ro", ro)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: whole
    path: %[1]s
  - name: etcd
    path: %[2]s/etcd
    fsync: {}
    probe_dir: %[1]s/probes
  - name: writable
    path: %[2]s
`, ro, data))
	was := listing(t, data, true)
	want := []string{
		"diskprobe.yml:3: targets[0].path: " + ro + " is on a read-only filesystem, where the exporter cannot create its probe files",
		"diskprobe.yml:7: targets[1].probe_dir: " + ro + "/probes is on a read-only filesystem",
	}
	code, stdout, stderr := configCheck(t, cfg)
	if code != 1 {
		t.Fatalf("--config.check on a read-only probe directory: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	for _, w := range append(want, "ReadWritePaths="+ro+" ", "ReadWritePaths="+ro+"/probes ") {
		if !strings.Contains(stderr, w) {
			t.Errorf("--config.check said:\n%s\nwant %q", stderr, w)
		}
	}
	if strings.Contains(stderr, "targets[2]") {
		t.Errorf("the writable target was refused:\n%s", stderr)
	}
	out, err := exec.Command(testenv.Binary(t), "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), want[0]) || !strings.Contains(string(out), want[1]) {
		t.Errorf("the exporter started on a read-only probe directory (err %v):\n%s", err, out)
	}
	if got := listing(t, data, true); got != was {
		t.Errorf("the check changed %s:\n%s\nwas\n%s", data, got, was)
	}
}

// What a directory the service user cannot write does: root passes every permission
// check, so --config.check is run as nobody here, the user the exporter runs as. It
// passed, and every round then failed with "permission denied".
func TestConfigCheckRefusesADirectoryTheServiceUserCannotWrite(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("needs a nobody user")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	// Everything nobody needs to reach: a world-searchable base and a config it can read.
	base, err := os.MkdirTemp("", "diskprobe-writable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	dir := func(name string, owner int) string {
		d := filepath.Join(base, name)
		must(os.Mkdir(d, 0o755))
		must(os.Chown(d, owner, owner))
		return d
	}
	mine, roots, etcd, probes, stale := dir("mine", uid), dir("roots", 0), dir("etcd", 0), dir("probes", 0), dir("stale", uid)
	// A probe directory left by a run as root: nobody may not write in it.
	must(os.Mkdir(filepath.Join(stale, ".diskprobe"), 0o700))
	cfg := filepath.Join(base, "diskprobe.yml")
	must(os.WriteFile(cfg, []byte(fmt.Sprintf(`targets:
  - name: mine
    path: %s
  - name: roots
    path: %s
  - name: etcd
    path: %s
    probe_dir: %s
  - name: stale
    path: %s
`, mine, roots, etcd, probes, stale)), 0o644))
	was := listing(t, base, true)

	cmd := exec.Command(framework.BinaryForUser(t, testenv.Binary(t)), "--config.file="+cfg, "--config.check")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	cmd.Dir = "/"
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("--config.check as nobody: %v, want exit 1\n%s%s", err, stdout.String(), stderr.String())
	}
	who := fmt.Sprintf("not writable by the exporter's user, %s (uid %d): permission denied; it cannot create its probe files there", nobody.Username, uid)
	for _, w := range []string{
		"diskprobe.yml:5: targets[1].path: " + roots + " is " + who,
		"diskprobe.yml:8: targets[2].probe_dir: " + probes + " is " + who,
		"diskprobe.yml:10: targets[3].path: " + stale + "/.diskprobe is " + who,
	} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("--config.check as nobody said:\n%s\nwant %q", stderr.String(), w)
		}
	}
	if strings.Contains(stderr.String(), "targets[0]") {
		t.Errorf("the directory nobody owns was refused:\n%s", stderr.String())
	}
	if got := listing(t, base, true); got != was {
		t.Errorf("--config.check as nobody changed %s:\n%s\nwas\n%s", base, got, was)
	}
}
