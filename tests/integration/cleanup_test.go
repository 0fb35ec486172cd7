package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// A target removed by a reload leaves its probe files (docs/configuration.md: a rename reuses them);
// `diskprobe_exporter cleanup DIR` then removes them, and only them.
func TestCleanupRemovesTheProbeFilesOfATargetTheReloadLeft(t *testing.T) {
	data, probeDir := t.TempDir(), t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    probe_dir: %s
    fsync:    {interval: 1s, ops: 2, file_size: 1MiB}
    randread: {interval: 1s, ops: 2, file_size: 1MiB}
    limits:   {min_free: 1MiB}
`, data, probeDir))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 30*time.Second, "fdatasync and read samples", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "etcd") >= 2 &&
			metric(f, "diskprobe_read_duration_seconds", "target", "etcd") >= 2
	})
	if err := os.WriteFile(cfg, []byte("targets:\n  - name: other\n    path: "+t.TempDir()+"\n    fsync: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Signal(1) // SIGHUP
	waitLog(t, e, 10*time.Second, "target=other")
	ours := filepath.Join(probeDir, ".diskprobe")
	for _, name := range []string{"fsync.probe", "read.probe"} {
		if _, err := os.Stat(filepath.Join(ours, name)); err != nil {
			t.Errorf("the reload removed the dropped target's %s (docs/configuration.md says they stay): %v", name, err)
		}
	}
	stopExporter(t, e)

	notOurs := filepath.Join(ours, "notes")
	writeFile(t, notOurs, "someone's")
	cleanup := func(args ...string) (string, string, error) {
		var stdout, stderr strings.Builder
		cmd := exec.Command(testenv.Binary(t), append([]string{"cleanup"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := cleanup("--dry-run", probeDir)
	if err != nil || out != filepath.Join(ours, "fsync.probe")+"\n"+filepath.Join(ours, "read.probe")+"\n" || !strings.Contains(errOut, notOurs+": left") {
		t.Errorf("cleanup --dry-run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(ours, "fsync.probe")); err != nil {
		t.Errorf("--dry-run removed a file: %v", err)
	}
	if out, errOut, err := cleanup(probeDir, data); err != nil || strings.Count(out, "\n") != 2 {
		t.Errorf("cleanup: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if _, err := os.Stat(notOurs); err != nil {
		t.Errorf("cleanup removed a file that is not the exporter's: %v", err)
	}
	if err := os.Remove(notOurs); err != nil {
		t.Fatal(err)
	}
	if out, _, err := cleanup(probeDir); err != nil || out != ours+"\n" {
		t.Errorf("cleanup of the emptied directory: %v, printed %q", err, out)
	}
	if _, err := os.Lstat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there: %v", ours, err)
	}
	entries, _ := os.ReadDir(data)
	if len(entries) != 0 {
		t.Errorf("the measured path holds %v", entries)
	}
}

// The Helm chart's pods write into a probe_dir the kubelet created for them; after uninstall,
// `cleanup --rmdir DIR` leaves nothing of the exporter's on the node: the files, .diskprobe/
// and DIR itself. A DIR holding anything else stays, named, and --rmdir never takes its
// directories from the configuration (which names targets' own paths).
func TestCleanupRmdirRemovesTheProbeDirectoryOnlyWhenNothingElseIsInIt(t *testing.T) {
	parent := t.TempDir()
	etcd := filepath.Join(parent, "etcd")
	probeDir := filepath.Join(parent, "diskprobe-etcd")
	shared := filepath.Join(parent, "shared")
	for _, d := range []string{etcd, probeDir, shared} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: a
    path: %s
    probe_dir: %s
    fsync: {interval: 1s, ops: 2, file_size: 1MiB}
    limits: {min_free: 1MiB}
  - name: b
    path: %s
    fsync: {interval: 1s, ops: 2, file_size: 1MiB}
    limits: {min_free: 1MiB}
`, etcd, probeDir, shared))
	e := framework.StartExporter(t, cfg)
	framework.WaitMetric(t, e, 30*time.Second, "fdatasync samples of both targets", func(f families) bool {
		return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "a") >= 2 &&
			metric(f, "diskprobe_fdatasync_duration_seconds", "target", "b") >= 2
	})
	stopExporter(t, e)
	writeFile(t, filepath.Join(shared, "someone-else"), "kept")

	run := func(args ...string) (string, string, error) {
		var stdout, stderr strings.Builder
		cmd := exec.Command(testenv.Binary(t), append([]string{"cleanup"}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	if out, errOut, err := run("--rmdir", "--config.file="+cfg); err == nil || !strings.Contains(errOut, "name the directories") || out != "" {
		t.Errorf("cleanup --rmdir without DIR: %v, want a refusal naming the directories\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err := run("--rmdir", "--dry-run", probeDir, shared)
	if err != nil || !strings.Contains(out, "\n"+probeDir+"\n") || strings.Contains(out, "\n"+shared+"\n") {
		t.Errorf("cleanup --rmdir --dry-run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(probeDir, ".diskprobe")); err != nil {
		t.Fatalf("--dry-run removed something: %v", err)
	}
	out, errOut, err = run("--rmdir", probeDir, shared)
	if err != nil {
		t.Fatalf("cleanup --rmdir: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "\n"+probeDir+"\n") || strings.Contains(out, "\n"+shared+"\n") || !strings.Contains(errOut, shared+": left") {
		t.Errorf("cleanup --rmdir printed:\n%s\nstderr:\n%s", out, errOut)
	}
	if _, err := os.Lstat(probeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the emptied probe directory %s is still there: %v", probeDir, err)
	}
	if entries, _ := os.ReadDir(shared); len(entries) != 1 || entries[0].Name() != "someone-else" {
		t.Errorf("%s holds %v, want only someone-else's file", shared, entries)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 2 {
		t.Errorf("%s holds %v, want only etcd and shared", parent, entries)
	}
}
