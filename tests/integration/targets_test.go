package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// configCheck runs `diskprobe_exporter --config.check` and returns its exit code and output.
func configCheck(t *testing.T, cfg string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd := exec.Command(testenv.Binary(t), "--config.file="+cfg, "--config.check")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

// mountTmpfs mounts a small tmpfs of our own on a temporary directory until cleanup.
func mountTmpfs(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "mount", "umount")
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, "mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

func TestTmpfsTargetRefusedAtConfigLoad(t *testing.T) {
	dir := mountTmpfs(t)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: ok
    path: %s
    fsync: {}
  - name: ram
    path: %s
    randread: {file_size: 1MiB}
`, t.TempDir(), dir))
	code, stdout, stderr := configCheck(t, cfg)
	if code == 0 {
		t.Fatalf("--config.check accepted read probes on tmpfs (exit 0):\n%s%s", stdout, stderr)
	}
	want := "diskprobe.yml:6: targets[1].path: " + dir + " is on tmpfs"
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "O_DIRECT") {
		t.Errorf("--config.check on a tmpfs target said:\n%s\nwant a line with %q that names O_DIRECT", stderr, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("--config.check wrote into the tmpfs: %v", entries)
	}
}

// fdatasync on memory returns at once: accepted, an fsync probe on tmpfs reported 20
// fdatasyncs in tens of microseconds every round, a healthy disk that does not exist.
func TestWriteProbesRefusedOnTmpfsWithWordsAboutFdatasync(t *testing.T) {
	dir := mountTmpfs(t)
	for _, probe := range []string{"fsync", "seqwrite", "commit"} {
		t.Run(probe, func(t *testing.T) {
			cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: ok
    path: %s
    fsync: {}
  - name: ram
    path: %s
    %s: {}
`, t.TempDir(), dir, probe))
			code, stdout, stderr := configCheck(t, cfg)
			if code != 1 {
				t.Fatalf("--config.check on %s on tmpfs: exit %d; want 1\n%s%s", probe, code, stdout, stderr)
			}
			want := "targets[1].path: " + dir + " is on tmpfs, which is memory, not a disk: fdatasync on memory returns at once"
			if !strings.Contains(stderr, want) || strings.Contains(stderr, "O_DIRECT") {
				t.Errorf("--config.check on %s on tmpfs said:\n%s\nwant a line with %q and no word of read probes", probe, stderr, want)
			}
			// The daemon refuses to start on it too.
			out, err := exec.Command(testenv.Binary(t), "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t)).CombinedOutput()
			if err == nil || !strings.Contains(string(out), want) {
				t.Errorf("the exporter started with %s on tmpfs (err %v):\n%s", probe, err, out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("wrote into the tmpfs: %v", entries)
			}
		})
	}
}

// A duplicate name, a missing path and a tmpfs path: --config.check reported the
// duplicate alone, and the other two only once it was fixed, one at a time; and the
// errors found on disk named the target's `- name:` line, not the path's.
func TestConfigCheckReportsEveryErrorOfTheFileAtOnce(t *testing.T) {
	ram := mountTmpfs(t)
	data := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %[1]s
  - name: gone
    # moved to the new disk
    path: %[1]s/nope
  - name: etcd
    fsync: {}
    path: %[2]s
`, data, ram))
	want := []string{
		"diskprobe.yml:6: targets[1].path: " + data + "/nope does not exist",
		`diskprobe.yml:7: targets[2].name: target name "etcd" is already used on line 2`,
		"diskprobe.yml:9: targets[2].path: " + ram + " is on tmpfs, which is memory, not a disk: fdatasync on memory returns at once",
	}
	check := func(what, out string) {
		t.Helper()
		var got []string
		for _, line := range strings.Split(out, "\n") {
			// The exporter logs each error as the err of a record; --config.check prints it bare.
			if _, e, ok := strings.Cut(line, `msg="invalid configuration; not starting" err=`); ok {
				line, _ = strconv.Unquote(e)
			}
			if strings.HasPrefix(line, "diskprobe.yml:") {
				got = append(got, line)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d errors, want %d:\n%s", what, len(got), len(want), out)
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("%s: error %d:\n  %s\nwant\n  %s…", what, i, got[i], want[i])
			}
		}
	}
	code, stdout, stderr := configCheck(t, cfg)
	if code != 1 {
		t.Fatalf("--config.check: exit %d, want 1:\n%s%s", code, stdout, stderr)
	}
	check("--config.check", stderr)
	out, err := exec.Command(testenv.Binary(t), "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t)).CombinedOutput()
	if err == nil {
		t.Fatalf("the exporter started:\n%s", out)
	}
	check("the exporter's start", string(out))
}

func TestWriteProbesRefusedOnABlockDevice(t *testing.T) {
	dev := testenv.LoopDevice(t, 16*mib)
	for _, probe := range []string{"fsync", "seqwrite", "commit"} {
		t.Run(probe, func(t *testing.T) {
			cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: raw
    path: %s
    randread: {}
    %s: {}
`, dev, probe))
			before := stats(t, dev)
			code, stdout, stderr := configCheck(t, cfg)
			if code == 0 {
				t.Fatalf("--config.check accepted %s on block device %s (exit 0):\n%s%s", probe, dev, stdout, stderr)
			}
			want := fmt.Sprintf("diskprobe.yml:5: targets[0].%s: %s is a block device: write probes are refused", probe, dev)
			if !strings.Contains(stderr, want) {
				t.Errorf("--config.check said:\n%s\nwant %q", stderr, want)
			}
			// And the daemon itself refuses to start on it.
			out, err := exec.Command(testenv.Binary(t), "--config.file="+cfg, "--web.listen-address="+framework.FreePort(t)).CombinedOutput()
			if err == nil || !strings.Contains(string(out), want) {
				t.Errorf("the exporter started on a config with %s on a block device (err %v):\n%s", probe, err, out)
			}
			if after := stats(t, dev); after.WriteIOs != before.WriteIOs {
				t.Errorf("%d writes reached %s", after.WriteIOs-before.WriteIOs, dev)
			}
		})
	}
}

func TestTargetInfoNamesTheBlockDevice(t *testing.T) {
	ext4Dev, ext4Dir := testenv.LoopExt4(t, 64*mib)
	disk, part := testenv.PartitionedLoopDevice(t, 64*mib)
	partDir := testenv.MountExt4(t, part)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: file_on_loop
    path: %s
    fsync: {interval: 1h, ops: 1, file_size: 1MiB}
    limits: {min_free: 1MiB}
  - name: file_on_partition
    path: %s
    fsync: {interval: 1h, ops: 1, file_size: 1MiB}
    limits: {min_free: 1MiB}
  - name: raw_partition
    path: %s
    randread: {interval: 1h, ops: 1}
  - name: raw_disk
    path: %s
    randread: {interval: 1h, ops: 1}
`, ext4Dir, partDir, part, disk))
	e := framework.StartExporter(t, cfg)
	f := e.MustScrape()
	base := filepath.Base
	for _, want := range []map[string]string{
		{"target": "file_on_loop", "path": ext4Dir, "kind": "directory", "device": base(ext4Dev)},
		{"target": "file_on_partition", "path": partDir, "kind": "directory", "device": base(part)},
		{"target": "raw_partition", "path": part, "kind": "blockdev", "device": base(part)},
		{"target": "raw_disk", "path": disk, "kind": "blockdev", "device": base(disk)},
	} {
		// A partition takes model and rotational from its disk.
		parent := want["device"]
		if parent == base(part) {
			parent = base(disk)
		}
		want["rotational"] = sysfsAttr(t, parent, "queue/rotational")
		if v, ok := framework.Value(f, "diskprobe_target_info", want); !ok || v != 1 {
			t.Errorf("no diskprobe_target_info %v = 1; exposed:\n%s", want, describe(f, "diskprobe_target_info"))
		}
	}
	// The targets do run on the devices inspection found behind them.
	framework.WaitMetric(t, e, 15*time.Second, "one round on every target", func(f families) bool {
		return metric(f, "diskprobe_probe_runs_total", "target", "raw_disk") > 0 &&
			metric(f, "diskprobe_probe_runs_total", "target", "raw_partition") > 0 &&
			metric(f, "diskprobe_probe_runs_total", "target", "file_on_partition") > 0
	})
}

func sysfsAttr(t *testing.T, dev, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", dev, attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// describe prints the series of one family, for failure messages.
func describe(f families, name string) string {
	var b strings.Builder
	for _, m := range f[name].GetMetric() {
		for _, l := range m.GetLabel() {
			fmt.Fprintf(&b, "%s=%q ", l.GetName(), l.GetValue())
		}
		b.WriteString("\n")
	}
	return b.String()
}
