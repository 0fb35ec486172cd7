package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// An etcd data directory that is a disk of its own, mounted at the data directory (what
// production guides recommend): nothing beside it is on that disk, so the only probe
// directory that measures it is inside it. It must be accepted there, directly under the
// mount point, the probe files must land in it, and etcd must say at its start what the
// exporter's log line says it will.
func TestProbeDirInsideEtcdDataDirectoryOnItsOwnMountIsAccepted(t *testing.T) {
	testenv.RequireRoot(t)
	dev, data := testenv.LoopExt4(t, 512*mib) // the etcd data directory: a mount point
	probeDir := filepath.Join(data, config.ProbeDirName)
	if err := os.Mkdir(probeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    probe_dir: %s
    fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
    randread: {interval: 1s, ops: 5, file_size: 1MiB}
    limits:   {min_free: 1MiB}
`, data, probeDir))
	if code, out, errOut := configCheck(t, cfg); code != 0 {
		t.Fatalf("refused (exit %d):\n%s%s", code, out, errOut)
	}

	etcd := framework.StartEtcd(t, data, "--logger=zap")
	e := framework.StartExporter(t, cfg)
	f := framework.WaitMetric(t, e, 30*time.Second, "fdatasync and read samples", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "etcd") >= 10 &&
			metric(f, "diskprobe_read_duration_seconds", "target", "etcd") >= 10
	})
	if !hasMetric(f, "diskprobe_target_info", "target", "etcd", "path", data, "device", filepath.Base(dev)) {
		t.Errorf("diskprobe_target_info does not name the measured path %s on %s", data, filepath.Base(dev))
	}
	if n := metric(f, "diskprobe_probe_errors_total", "target", "etcd"); n != 0 {
		t.Errorf("%v probe errors:\n%s", n, e.Log.String())
	}
	waitLog(t, e, 5*time.Second, "etcd warns about this entry at each start")
	stopExporter(t, e)
	etcd.Stop()

	for _, name := range []string{"fsync.probe", "read.probe"} {
		if _, err := os.Stat(filepath.Join(probeDir, ".diskprobe", name)); err != nil {
			t.Errorf("probe file not in the probe directory: %v", err)
		}
	}
	entries, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range entries {
		names = append(names, d.Name())
	}
	if want := []string{config.ProbeDirName, "lost+found", "member"}; !slices.Equal(names, want) {
		t.Errorf("the data directory holds %v, want %v: the exporter wrote outside its probe directory", names, want)
	}
	target := config.Target{Path: data, ProbeDir: probeDir}
	if !strings.Contains(etcd.Log.String(), target.EtcdWarning()) {
		t.Errorf("etcd did not log the warning the exporter quotes (%s):\n%s", target.EtcdWarning(), etcd.Log.String())
	}
}

// The probe_dir refusals around a data directory, on its own mount and not: each names the
// field, and the directory each suggests ("e.g. ...") is accepted, so that no message sends
// the reader to a place another one refuses.
func TestProbeDirRefusalsSuggestAnAcceptedDirectory(t *testing.T) {
	testenv.RequireRoot(t)
	_, mnt := testenv.LoopExt4(t, 64*mib) // a disk mounted at the data directory
	elsewhere := t.TempDir()              // the machine's own disk
	sub := filepath.Join(mnt, "etcd")     // a data directory one level down on that disk
	bound := filepath.Join(elsewhere, "etcd-bind")
	for _, d := range []string{
		filepath.Join(mnt, "member"), filepath.Join(mnt, "proxy"), filepath.Join(mnt, "notours"),
		filepath.Join(mnt, config.ProbeDirName, "deeper"),
		filepath.Join(sub, config.ProbeDirName), bound, filepath.Join(elsewhere, "beside"),
	} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(mnt, "member", "wal"), "etcd's")
	writeFile(t, filepath.Join(mnt, "notours", "data"), "someone's")
	// A directory of the disk bind-mounted where a data directory is expected.
	testenv.BindMount(t, sub, bound)

	accepted := func(path, probeDir string) (bool, string) {
		code, out, errOut := configCheck(t, framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n", path, probeDir)))
		return code == 0, out + errOut
	}
	if ok, out := accepted(mnt, filepath.Join(mnt, config.ProbeDirName, "deeper")); ok || !strings.Contains(out, "is not directly under") {
		t.Errorf("a probe directory two levels under the mount point: %s", out)
	}
	// The empty probe directory directly under the mount point is ours; once it holds
	// "deeper" it is not, and the refusal says so.
	if err := os.Remove(filepath.Join(mnt, config.ProbeDirName, "deeper")); err != nil {
		t.Fatal(err)
	}
	// The packaged unit's layout (docs/install.md): the directory under the mount point, bind-mounted
	// beside it, where a user that cannot enter etcd's 0700 directory reaches it.
	bindBeside := filepath.Join(elsewhere, "diskprobe-etcd")
	if err := os.Mkdir(bindBeside, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.BindMount(t, filepath.Join(mnt, config.ProbeDirName), bindBeside)
	if ok, out := accepted(mnt, bindBeside); !ok {
		t.Errorf("the directory under the mount point, bind-mounted beside it, is refused:\n%s", out)
	}
	suggestion := regexp.MustCompile(`e\.g\. (/[^ )]+)`)
	for _, c := range []struct{ name, path, probeDir, want string }{
		{"the mount point itself", mnt, mnt, "is the measured path itself"},
		{"etcd's member directory", mnt, filepath.Join(mnt, "member"), "is named as etcd's own entries"},
		{"etcd's proxy directory", mnt, filepath.Join(mnt, "proxy"), "is named as etcd's own entries"},
		{"the filesystem's lost+found", mnt, filepath.Join(mnt, "lost+found"), "is the filesystem's own directory"},
		{"a directory holding another program's file", mnt, filepath.Join(mnt, "notours"), "holds \"data\": a probe directory inside the measured path must be the exporter's own"},
		{"beside the mount point, on another disk", mnt, filepath.Join(elsewhere, "beside"), "is the root of its filesystem (a disk of its own is mounted there), so nothing beside it is on that disk: use a directory directly under it"},
		{"inside a data directory that is not a mount point", sub, filepath.Join(sub, config.ProbeDirName), "which is not the root of its filesystem: probe_dir exists so that nothing is written there; put it beside it on the same filesystem"},
		{"inside a bind mount of a directory", bound, filepath.Join(bound, config.ProbeDirName), "is a mount of the directory /etcd of its filesystem"},
		{"beside a bind mount of a directory", bound, filepath.Join(elsewhere, "beside"), "is a mount of the directory /etcd of its filesystem"},
	} {
		ok, out := accepted(c.path, c.probeDir)
		if ok || !strings.Contains(out, ":4: targets[0].probe_dir: ") && !strings.Contains(out, ":2: targets[0].probe_dir: ") || !strings.Contains(out, c.want) {
			t.Errorf("%s: want a refusal naming the field and saying %q, got:\n%s", c.name, c.want, out)
			continue
		}
		m := suggestion.FindStringSubmatch(out)
		if m == nil {
			continue
		}
		if err := os.MkdirAll(m[1], 0o700); err != nil {
			t.Fatal(err)
		}
		if ok, out2 := accepted(c.path, m[1]); !ok {
			t.Errorf("%s: the refusal suggests %s, which is refused too:\n%s\n%s", c.name, m[1], out, out2)
		}
	}
}

// A btrfs subvolume mounted at the data directory has a device number of its own, as a
// filesystem does: a directory beside it, even on another subvolume of the same btrfs, is
// another device, so the probe directory goes directly under it, as on a disk of its own.
func TestProbeDirUnderABtrfsSubvolumeMountedAtTheDataDirectoryIsAccepted(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "mkfs.btrfs", "btrfs", "mount", "umount")
	dev := testenv.LoopDevice(t, 256*mib)
	testenv.Run(t, "mkfs.btrfs", "-q", "-f", dev)
	top := filepath.Join(t.TempDir(), "top")
	data := filepath.Join(t.TempDir(), "etcd")
	for _, d := range []string{top, data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Run(t, "mount", dev, top)
	t.Cleanup(func() { testenv.Run(t, "umount", top) })
	testenv.Run(t, "btrfs", "subvolume", "create", filepath.Join(top, "etcd"))
	testenv.Run(t, "btrfs", "subvolume", "create", filepath.Join(top, "other"))
	testenv.Run(t, "mount", "-o", "subvol=etcd", dev, data)
	t.Cleanup(func() { testenv.Run(t, "umount", data) })
	if err := os.Mkdir(filepath.Join(data, config.ProbeDirName), 0o700); err != nil {
		t.Fatal(err)
	}

	check := func(probeDir string) (int, string) {
		code, out, errOut := configCheck(t, framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n", data, probeDir)))
		return code, out + errOut
	}
	if code, out := check(filepath.Join(data, config.ProbeDirName)); code != 0 {
		t.Errorf("the probe directory under the subvolume's mount point is refused:\n%s", out)
	}
	if code, out := check(filepath.Join(top, "other")); code == 0 || !strings.Contains(out, "is the root of its filesystem") {
		t.Errorf("a directory on another subvolume: want a refusal that sends the probe directory under %s, got:\n%s", data, out)
	}
}
