package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseFile reads and parses a file as the daemon does, without asking the disk.
func parseFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "diskprobe.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBadConfigsNameFileLineAndField(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, want string
	}{
		{"unknown probe key", "targets:\n  - name: a\n    path: /tmp\n    fsyncc: {}\n", `diskprobe.yml:4: targets[0]: unknown field "fsyncc"`},
		{"unknown top-level key", "targetz: []\n", `diskprobe.yml:1: unknown field "targetz"`},
		{"unknown probe field", "targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: 1s, opps: 3}\n", `diskprobe.yml:4: targets[0].fsync: unknown field "opps"`},
		{"file_size on seqread", "targets:\n  - name: a\n    path: /tmp\n    seqread: {file_size: 1MiB}\n", `diskprobe.yml:4: targets[0].seqread: unknown field "file_size"`},
		{"unknown limit", "targets:\n  - name: a\n    path: /tmp\n    limits: {iopz: 3}\n", `diskprobe.yml:4: targets[0].limits: unknown field "iopz"`},
		{"empty file", "", `diskprobe.yml: empty file`},
		{"no targets", "targets: []\n", `diskprobe.yml:1: targets: no targets configured`},
		{"targets not a list", "targets: {name: a}\n", `diskprobe.yml:1: targets: must be a list of targets`},
		{"target not a mapping", "targets:\n  - /var/lib/etcd\n", `diskprobe.yml:2: targets[0]: expected a mapping, got "/var/lib/etcd"`},
		{"missing name", "targets:\n  - path: /tmp\n", `diskprobe.yml:2: targets[0]: missing field "name"`},
		{"missing path", "targets:\n  - name: a\n", `diskprobe.yml:2: targets[0]: missing field "path"`},
		{"invalid name", "targets:\n  - name: \"etcd data\"\n    path: /tmp\n", `diskprobe.yml:2: targets[0].name: "etcd data" is not a valid target name`},
		{"duplicate name", "targets:\n  - name: a\n    path: /tmp\n  - name: a\n    path: /var\n", `diskprobe.yml:4: targets[1].name: target name "a" is already used on line 2`},
		{"duplicate path", "targets:\n  - name: a\n    path: /tmp\n  - name: b\n    path: /tmp/\n", `diskprobe.yml:5: targets[1].path: /tmp is already probed by target "a"`},
		{"probe_dir is another target's path", "targets:\n  - name: a\n    path: /srv/a\n  - name: b\n    path: /srv/b\n    probe_dir: /srv/a/\n", `diskprobe.yml:6: targets[1].probe_dir: /srv/a already holds the probe files of target "a" (line 2): two targets in one probe directory would replace each other's files; give each a probe_dir of its own`},
		{"one probe_dir for two targets", "targets:\n  - name: a\n    path: /srv/a\n    probe_dir: /srv/p\n  - name: b\n    path: /srv/b\n    probe_dir: /srv/p\n", `diskprobe.yml:7: targets[1].probe_dir: /srv/p already holds the probe files of target "a" (line 2): two targets in one probe directory would replace each other's files; give each a probe_dir of its own`},
		{"duplicate key", "targets:\n  - name: a\n    name: b\n    path: /tmp\n", `diskprobe.yml:3: targets[0]: field "name" given twice (first on line 2)`},
		{"interval under 1s", "targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: 500ms}\n", `diskprobe.yml:4: targets[0].fsync.interval: must be at least 1s, got 500ms`},
		{"interval not a duration", "targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: often}\n", `diskprobe.yml:4: targets[0].fsync.interval: expected a duration such as 15s or 10m, got "often"`},
		{"zero ops", "targets:\n  - name: a\n    path: /tmp\n    randread: {ops: 0}\n", `diskprobe.yml:4: targets[0].randread.ops: must be between 1 and 1000000, got 0`},
		{"ops not a number", "targets:\n  - name: a\n    path: /tmp\n    randread: {ops: many}\n", `diskprobe.yml:4: targets[0].randread.ops: expected a whole number, got "many"`},
		{"negative size", "targets:\n  - name: a\n    path: /tmp\n    fsync: {block_size: -1}\n", `diskprobe.yml:4: targets[0].fsync.block_size: expected a size such as 4096, 4KiB, 64MiB or 1GiB, got "-1"`},
		{"decimal unit refused", "targets:\n  - name: a\n    path: /tmp\n    seqread: {bytes: 64MB}\n", `diskprobe.yml:4: targets[0].seqread.bytes: expected a size such as 4096, 4KiB, 64MiB or 1GiB, got "64MB"`},
		{"zero size", "targets:\n  - name: a\n    path: /tmp\n    seqread: {bytes: 0}\n", `diskprobe.yml:4: targets[0].seqread.bytes: must be greater than 0`},
		{"block larger than file", "targets:\n  - name: a\n    path: /tmp\n    randread: {block_size: 1MiB, file_size: 512KiB}\n", `diskprobe.yml:4: targets[0].randread.block_size: must not exceed file_size (512KiB), got 1MiB`},
		{"fsync file too small", "targets:\n  - name: a\n    path: /tmp\n    fsync: {file_size: 4KiB}\n", `diskprobe.yml:4: targets[0].fsync.file_size: must hold the 4KiB header and at least one block_size (2300), got 4KiB`},
		{"block larger than bytes", "targets:\n  - name: a\n    path: /tmp\n    seqread: {bytes: 1MiB, block_size: 2MiB}\n", `diskprobe.yml:4: targets[0].seqread.block_size: must not exceed bytes (1MiB), got 2MiB`},
		{"block size over cap", "targets:\n  - name: a\n    path: /tmp\n    seqread: {bytes: 1GiB, block_size: 128MiB}\n", `diskprobe.yml:4: targets[0].seqread.block_size: must be at most 64MiB, got 128MiB`},
		{"commit pages zero", "targets:\n  - name: a\n    path: /tmp\n    commit: {pages: 0}\n", `diskprobe.yml:4: targets[0].commit.pages: must be between 1 and 1000000, got 0`},
		{"commit pages not a number", "targets:\n  - name: a\n    path: /tmp\n    commit: {pages: ten}\n", `diskprobe.yml:4: targets[0].commit.pages: expected a whole number, got "ten"`},
		{"commit pages over cap", "targets:\n  - name: a\n    path: /tmp\n    commit:\n      pages: 5000\n", `diskprobe.yml:5: targets[0].commit.pages: must be at most 1024, got 5000`},
		{"commit file too small", "targets:\n  - name: a\n    path: /tmp\n    commit:\n      interval: 15s\n      file_size: 64KiB\n", `diskprobe.yml:6: targets[0].commit.file_size: must hold the header, two meta pages and 10 pages of up to 64KiB each (832KiB), got 64KiB`},
		{"commit zero ops", "targets:\n  - name: a\n    path: /tmp\n    commit: {ops: 0}\n", `diskprobe.yml:4: targets[0].commit.ops: must be between 1 and 1000000, got 0`},
		{"commit interval under 1s", "targets:\n  - name: a\n    path: /tmp\n    commit: {interval: 10ms}\n", `diskprobe.yml:4: targets[0].commit.interval: must be at least 1s, got 10ms`},
		{"commit block_size", "targets:\n  - name: a\n    path: /tmp\n    commit: {block_size: 4KiB}\n", `diskprobe.yml:4: targets[0].commit: unknown field "block_size"`},
		{"pages on fsync", "targets:\n  - name: a\n    path: /tmp\n    fsync: {pages: 3}\n", `diskprobe.yml:4: targets[0].fsync: unknown field "pages"`},
		{"zero iops", "targets:\n  - name: a\n    path: /tmp\n    limits: {iops: 0}\n", `diskprobe.yml:4: targets[0].limits.iops: must be greater than 0, got 0`},
		{"iops not a number", "targets:\n  - name: a\n    path: /tmp\n    limits: {iops: fast}\n", `diskprobe.yml:4: targets[0].limits.iops: expected a number of operations per second, got "fast"`},
		{"zero bandwidth", "targets:\n  - name: a\n    path: /tmp\n    limits: {bandwidth: 0}\n", `diskprobe.yml:4: targets[0].limits.bandwidth: must be greater than 0`},
		{"bandwidth under one block", "targets:\n  - name: a\n    path: /tmp\n    seqread: {}\n    limits: {bandwidth: 512KiB}\n", `diskprobe.yml:5: targets[0].limits.bandwidth: 512KiB per second is less than one seqread block (1MiB): the probe could never run`},
		// The default probes meet the same checks as named ones: this was accepted while the
		// same limit with an explicit `seqread: {}` was refused.
		{"bandwidth under one default block", "targets:\n  - name: a\n    path: /tmp\n    limits: {bandwidth: 512KiB}\n", `diskprobe.yml:4: targets[0].limits.bandwidth: 512KiB per second is less than one seqread block (1MiB): the probe could never run (seqread runs by default when a target names no probes: name the probes to run, or give seqread a smaller block_size)`},
		{"timeout under 1s", "targets:\n  - name: a\n    path: /tmp\n    limits: {timeout: 100ms}\n", `diskprobe.yml:4: targets[0].limits.timeout: must be at least 1s, got 100ms`},
		{"probe as a list", "targets:\n  - name: a\n    path: /tmp\n    fsync: [1, 2]\n", `diskprobe.yml:4: targets[0].fsync: expected a mapping, got a list`},
		{"name as a mapping", "targets:\n  - name: {a: b}\n    path: /tmp\n", `diskprobe.yml:2: targets[0].name: expected a string, got a mapping`},
		{"yaml syntax error", "targets:\n  - name: a\n   path: /tmp\n", `diskprobe.yml:1: invalid YAML: did not find expected '-' indicator`},
		{"tab indentation", "targets:\n\t- name: a\n", `diskprobe.yml:2: invalid YAML: found character that cannot start any token`},
	}
	if len(cases) < 20 {
		t.Fatalf("only %d bad configs", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseFile(writeConfig(t, dir, c.body))
			if err == nil {
				t.Fatalf("config accepted:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n  %s\ndoes not contain\n  %s", err, c.want)
			}
		})
	}
}

func TestEveryErrorOfAFileIsReportedAtOnce(t *testing.T) {
	body := "targets:\n  - name: a\n    path: /tmp\n    fsync: {interval: 1ms}\n  - name: b b\n    path: /var\n    limits: {iops: -1}\n"
	_, err := Parse([]byte(body), "x.yml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"x.yml:4: targets[0].fsync.interval", "x.yml:5: targets[1].name", "x.yml:7: targets[1].limits.iops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%s", want, err)
		}
	}
}

func TestSizesAndDurationsParse(t *testing.T) {
	cfg, err := Parse([]byte("targets:\n  - name: a\n    path: /tmp\n    randread: {interval: 1m30s, block_size: 8KiB, file_size: 1GiB}\n    seqread: {bytes: 1048576, block_size: 512KiB}\n    limits: {iops: 12.5, bandwidth: 10MiB, min_free: 0}\n"), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	tg := cfg.Targets[0]
	if tg.Probe[ProbeRandread].Interval != 90*time.Second || tg.Probe[ProbeRandread].BlockSize != 8192 || tg.Probe[ProbeRandread].FileSize != GiB {
		t.Errorf("randread %+v", *tg.Probe[ProbeRandread])
	}
	if tg.Probe[ProbeSeqread].Bytes != MiB || tg.Probe[ProbeSeqread].BlockSize != 512*KiB {
		t.Errorf("seqread %+v", *tg.Probe[ProbeSeqread])
	}
	if tg.Limits.IOPS != 12.5 || tg.Limits.Bandwidth != 10*MiB || tg.Limits.MinFree != 0 {
		t.Errorf("limits %+v", tg.Limits)
	}
}

// The commit probe is opt-in: a target that names no probes does not get it, and `commit:`
// with nothing after it turns it on with the defaults.
func TestCommitProbeIsOptIn(t *testing.T) {
	cfg, err := Parse([]byte("targets:\n  - name: a\n    path: /tmp\n  - name: b\n    path: /var\n    commit:\n"), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Targets[0].probesFor(TypeDirectory)[ProbeCommit]; got != nil {
		t.Errorf("a target naming no probes runs commit: %+v", *got)
	}
	got := cfg.Targets[1].Probe[ProbeCommit]
	if want := (ProbeConfig{Interval: 15 * time.Second, Ops: 10, Pages: 10, FileSize: 128 * MiB}); got == nil || *got != want {
		t.Errorf("`commit:` gave %+v, want %+v", got, want)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"2300": 2300, "4KiB": 4096, "64MiB": 64 << 20, "1GiB": 1 << 30, "1TiB": 1 << 40, "10 MiB": 10 << 20, "512B": 512} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.5MiB", "64MB", "-1", "1KB", "99999999999TiB", "MiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	for _, n := range []int64{2300, 4096, 64 << 20, 1 << 30} {
		if got, _ := ParseSize(FormatSize(n)); got != n {
			t.Errorf("FormatSize(%d) = %q does not round-trip", n, FormatSize(n))
		}
	}
}

// A default probe's error is reported once, although it is checked for a directory and
// for a block device alike.
func TestDefaultProbeErrorReportedOnce(t *testing.T) {
	_, err := Parse([]byte("targets:\n  - name: a\n    path: /tmp\n    limits: {bandwidth: 2KiB}\n"), "diskprobe.yml")
	if err == nil {
		t.Fatal("a 2KiB/s bandwidth limit with the default probes was accepted")
	}
	for _, probe := range []string{"fsync", "randread", "seqread"} {
		if n := strings.Count(err.Error(), "one "+probe+" block"); n != 1 {
			t.Errorf("the %s block error appears %d times, want once:\n%s", probe, n, err)
		}
	}
}

// The rule in defaults.go: a kind takes exactly the fields whose default is not zero.
// A key the kind does not take (file_size on seqread) is an unknown field at its line,
// not a value silently ignored; a key it takes changes that field and no other.
func TestAProbeTakesExactlyTheFieldsItHasADefaultFor(t *testing.T) {
	fields := []struct {
		key, value string
		field      func(*ProbeConfig) any // a pointer to the field
		set        func(*ProbeConfig)
	}{
		{"interval", "7s", func(c *ProbeConfig) any { return &c.Interval }, func(c *ProbeConfig) { c.Interval = 7 * time.Second }},
		{"ops", "7", func(c *ProbeConfig) any { return &c.Ops }, func(c *ProbeConfig) { c.Ops = 7 }},
		{"bytes", "7MiB", func(c *ProbeConfig) any { return &c.Bytes }, func(c *ProbeConfig) { c.Bytes = 7 * MiB }},
		{"block_size", "8KiB", func(c *ProbeConfig) any { return &c.BlockSize }, func(c *ProbeConfig) { c.BlockSize = 8 * KiB }},
		{"file_size", "7MiB", func(c *ProbeConfig) any { return &c.FileSize }, func(c *ProbeConfig) { c.FileSize = 7 * MiB }},
		{"pages", "7", func(c *ProbeConfig) any { return &c.Pages }, func(c *ProbeConfig) { c.Pages = 7 }},
	}
	if n := reflect.TypeOf(ProbeConfig{}).NumField(); n != len(fields) {
		t.Fatalf("ProbeConfig has %d fields, this test knows %d", n, len(fields))
	}
	for _, k := range ProbeKinds() {
		for _, f := range fields {
			body := fmt.Sprintf("targets:\n  - name: a\n    path: /tmp\n    %s: {%s: %s}\n", k.Name, f.key, f.value)
			cfg, err := Parse([]byte(body), "diskprobe.yml")
			def := Default(k.Name)
			if reflect.ValueOf(f.field(&def)).Elem().IsZero() {
				want := fmt.Sprintf(`diskprobe.yml:4: targets[0].%s: unknown field %q`, k.Name, f.key)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s.%s, which has no default: got %v, want %q", k.Name, f.key, err, want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s.%s: %v", k.Name, f.key, err)
				continue
			}
			want := def
			f.set(&want)
			if got := *cfg.Targets[0].Probe[k.Name]; got != want {
				t.Errorf("%s: {%s: %s} gave %+v, want %+v", k.Name, f.key, f.value, got, want)
			}
		}
	}
}
