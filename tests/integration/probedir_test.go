package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

func TestProbeDirOnAnotherFilesystemIsRefusedAtLoad(t *testing.T) {
	testenv.RequireRoot(t)
	_, fsA := testenv.LoopExt4(t, 64*mib)
	_, fsB := testenv.LoopExt4(t, 64*mib)
	data := filepath.Join(fsA, "etcd")
	for _, d := range []string{data, filepath.Join(fsA, "real"), filepath.Join(fsA, "beside"), filepath.Join(fsA, "bound-same"), filepath.Join(fsB, "other")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A directory of filesystem B brought in beside the path by a bind mount.
	testenv.BindMount(t, filepath.Join(fsB, "other"), filepath.Join(fsA, "beside"))
	// A directory of filesystem A bind-mounted elsewhere on A: the same filesystem, as a
	// container sees two hostPath mounts of one host filesystem.
	testenv.BindMount(t, filepath.Join(fsA, "real"), filepath.Join(fsA, "bound-same"))

	for _, c := range []struct {
		name, probeDir string
		refused        bool
	}{
		{"another loop filesystem", filepath.Join(fsB, "other"), true},
		{"a bind mount of another filesystem beside the path", filepath.Join(fsA, "beside"), true},
		{"a bind mount of the same filesystem", filepath.Join(fsA, "bound-same"), false},
		{"a plain directory beside the path", filepath.Join(fsA, "real"), false},
	} {
		code, out, errOut := configCheck(t, framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n", data, c.probeDir)))
		if c.refused {
			if code == 0 || !strings.Contains(errOut, ":4: targets[0].probe_dir: "+c.probeDir+" is on another filesystem") {
				t.Errorf("%s: want a refusal naming file, line and field, got exit %d:\n%s%s", c.name, code, out, errOut)
			}
		} else if code != 0 {
			t.Errorf("%s: refused (exit %d):\n%s", c.name, code, errOut)
		}
	}
}

// listing is what a directory holds, recursively: every entry's name and mode, and with
// withContent its size and modification time too.
func listing(t *testing.T, dir string, withContent bool) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", strings.TrimPrefix(p, dir), fi.Mode())
		if withContent {
			line += fmt.Sprintf(" %d %v", fi.Size(), fi.ModTime().UnixNano())
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestProbeDirMeasuresThePathsDiskWithoutWritingInIt(t *testing.T) {
	testenv.RequireRoot(t)
	dev, fs := testenv.LoopExt4(t, 512*mib)
	data := filepath.Join(fs, "etcd")
	beside := filepath.Join(fs, "diskprobe-etcd")
	for _, d := range []string{data, filepath.Join(data, "member"), beside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(data, "member", "wal"), "not ours")
	before := listing(t, data, true)

	e := framework.StartExporter(t, framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: etcd
    path: %s
    probe_dir: %s
    fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
    randread: {interval: 1s, ops: 5, file_size: 1MiB}
    limits:   {min_free: 1MiB}
`, data, beside)))
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
	stopExporter(t, e)
	if after := listing(t, data, true); after != before {
		t.Errorf("the measured path changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, name := range []string{"fsync.probe", "read.probe"} {
		if _, err := os.Stat(filepath.Join(beside, ".diskprobe", name)); err != nil {
			t.Errorf("probe file not in the probe directory: %v", err)
		}
	}
}
