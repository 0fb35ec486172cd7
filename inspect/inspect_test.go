package inspect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// load reads a file and gives each target its type as Target does (which also checks the
// filesystem and the device), reporting every error in file order.
func load(file string) (*config.Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(data, file)
	if cfg == nil {
		return nil, err
	}
	var errs []error
	for i := range cfg.Targets {
		errs = append(errs, setType(file, &cfg.Targets[i]))
	}
	if err := config.JoinErrors(err, errors.Join(errs...)); err != nil {
		return nil, err
	}
	return cfg, nil
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "diskprobe.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInspectRefusesWhatIsNotOnDisk(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, body, want string }{
		{"missing path", "targets:\n  - name: a\n    path: " + dir + "/nope\n", "diskprobe.yml:3: targets[0].path: " + dir + "/nope does not exist"},
		{"regular file", "targets:\n  - name: a\n    path: " + file + "\n", "targets[0].path: " + file + " is neither a directory nor a block device"},
		{"character device", "targets:\n  - name: a\n    path: /dev/null\n", "/dev/null is neither a directory nor a block device"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(writeConfig(t, dir, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// A duplicate name, a missing path and a bad probe_dir in one file: all three in one run,
// parse-time and inspect-time alike, each at the line of its field, in file order. The
// parse errors stopped the run before the disks were asked, and inspect-time errors named
// the target's `- name:` line.
func TestParseAndInspectErrorsAreReportedTogetherAtTheirFieldsLines(t *testing.T) {
	dir := t.TempDir()
	body := fmt.Sprintf(`targets:
  - name: a
    path: %[1]s/data
    probe_dir: %[1]s/missing-probe-dir
  - name: b
    # a comment between the name and the path
    path: %[1]s/nope
    fsync: {}
  - name: a
    path: /var
    randread: {block_size: 1MiB,
      file_size: 512KiB}
`, dir)
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := load(writeConfig(t, dir, body))
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		"diskprobe.yml:4: targets[0].probe_dir: " + dir + "/missing-probe-dir does not exist",
		"diskprobe.yml:7: targets[1].path: " + dir + "/nope does not exist",
		`diskprobe.yml:9: targets[2].name: target name "a" is already used on line 2`,
		"diskprobe.yml:11: targets[2].randread.block_size: must not exceed file_size",
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(got), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n  %s\nwant\n  %s...", i, got[i], want[i])
		}
	}
}

func TestDefaultsFollowTheDesign(t *testing.T) {
	dir := t.TempDir()
	cfg, err := load(writeConfig(t, dir, "targets:\n  - name: dir\n    path: .\n  - name: tuned\n    path: /tmp\n    fsync: {}\n    seqwrite:\n    limits: {iops: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Targets[0]
	if d.Path != dir || d.Type != config.TypeDirectory {
		t.Errorf("relative path made absolute as %q (%s), want %q", d.Path, d.Type, dir)
	}
	if got := d.ProbeNames(); strings.Join(got, ",") != "fsync,randread,seqread" {
		t.Errorf("directory default probes %v", got)
	}
	if *d.Probe[config.ProbeFsync] != (config.ProbeConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 2300, FileSize: 64 * config.MiB}) {
		t.Errorf("fsync defaults %+v", *d.Probe[config.ProbeFsync])
	}
	if *d.Probe[config.ProbeRandread] != (config.ProbeConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 4 * config.KiB, FileSize: 256 * config.MiB}) {
		t.Errorf("randread defaults %+v", *d.Probe[config.ProbeRandread])
	}
	if *d.Probe[config.ProbeSeqread] != (config.ProbeConfig{Interval: 10 * time.Minute, Bytes: 64 * config.MiB, BlockSize: config.MiB}) {
		t.Errorf("seqread defaults %+v", *d.Probe[config.ProbeSeqread])
	}
	if d.Limits != (config.Limits{IOPS: 200, Bandwidth: 50 * config.MiB, Timeout: 30 * time.Second, MinFree: config.GiB}) {
		t.Errorf("limit defaults %+v", d.Limits)
	}
	tuned := cfg.Targets[1]
	if got := tuned.ProbeNames(); strings.Join(got, ",") != "fsync,seqwrite" {
		t.Errorf("explicit probes %v: a present key turns a probe on, absent keys stay off", got)
	}
	if *tuned.Probe[config.ProbeSeqwrite] != config.Default(config.ProbeSeqwrite) || tuned.Limits.IOPS != 100 || tuned.Limits.Bandwidth != 50*config.MiB {
		t.Errorf("partial keys did not keep the other defaults: %+v %+v", *tuned.Probe[config.ProbeSeqwrite], tuned.Limits)
	}
}

func TestWriteProbesAreRefusedOnBlockDevices(t *testing.T) {
	dev := findBlockDevice(t)
	_, err := load(writeConfig(t, t.TempDir(), "targets:\n  - name: a\n    path: "+dev+"\n    fsync: {}\n    seqwrite: {}\n"))
	if err == nil {
		t.Fatal("write probes accepted on a block device")
	}
	for _, want := range []string{"targets[0].fsync: " + dev + " is a block device: write probes are refused", "targets[0].seqwrite: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	cfg, err := load(writeConfig(t, t.TempDir(), "targets:\n  - name: a\n    path: "+dev+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Targets[0].ProbeNames(); cfg.Targets[0].Type != config.TypeBlockDevice || strings.Join(got, ",") != "randread,seqread" {
		t.Errorf("block device defaults: kind %s probes %v", cfg.Targets[0].Type, got)
	}
}

// findBlockDevice returns any block device node; reading its metadata touches nothing.
func findBlockDevice(t *testing.T) string {
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		p := "/dev/" + e.Name()
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0 {
			return p
		}
	}
	t.Skip("no block device node in /dev")
	return ""
}

func TestExampleConfigIsValid(t *testing.T) {
	if err := os.MkdirAll("../data", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := load("../examples/diskprobe.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) == 0 {
		t.Fatal("example has no targets")
	}
}

func TestProbeDirIsRefusedUnlessABesideDirectoryOnTheSameFilesystem(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "etcd")
	beside := filepath.Join(root, "diskprobe-etcd")
	for _, d := range []string{data, beside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(beside, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ probeDir, want string }{
		{filepath.Join(data, "probes"), "is inside the measured path " + data},
		{data, "is inside the measured path " + data},
		{link, "is a symlink"},
		{filepath.Join(root, "missing"), "does not exist: create it"},
		{file, "is not a directory"},
		{"", `targets[0].probe_dir: must not be empty`},
	} {
		cfgFile := writeConfig(t, t.TempDir(), fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %q\n", data, c.probeDir))
		_, err := load(cfgFile)
		if err == nil {
			t.Errorf("probe_dir %q accepted", c.probeDir)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(cfgFile)+":") || !strings.Contains(err.Error(), "targets[0].probe_dir: ") {
			t.Errorf("probe_dir %q: %v; want %q, naming file, line and field", c.probeDir, err, c.want)
		}
	}

	cfg, err := load(writeConfig(t, t.TempDir(), fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n", data, beside)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Targets[0]; got.ProbeDir != beside || got.ProbeRoot() != beside || got.Path != data {
		t.Errorf("target %+v: want path %s, probe files under %s", got, data, beside)
	}
	if !strings.Contains(cfg.Summary(), "probe files in "+beside) {
		t.Errorf("--config.check summary does not say where the probe files go: %s", cfg.Summary())
	}

	dev := findBlockDevice(t)
	_, err = load(writeConfig(t, t.TempDir(), fmt.Sprintf("targets:\n  - name: d\n    path: %s\n    probe_dir: %s\n", dev, beside)))
	if err == nil || !strings.Contains(err.Error(), "targets[0].probe_dir: "+dev+" is a block device") {
		t.Errorf("probe_dir on a block device target: %v", err)
	}
}
