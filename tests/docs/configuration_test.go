package docs

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// The YAML keys of the fields of config.ProbeConfig and config.Limits. A field added to
// either without a key here fails TestConfigurationReferenceIsTheCode, so that the
// reference cannot miss it.
var (
	probeFieldKeys = map[string]string{"Interval": "interval", "Ops": "ops", "Bytes": "bytes", "BlockSize": "block_size", "FileSize": "file_size", "Pages": "pages"}
	limitKeys      = map[string]string{"IOPS": "iops", "Bandwidth": "bandwidth", "Timeout": "timeout", "MinFree": "min_free"}
	// targetKeys are the keys of a target that are neither a probe nor limits (config/parse.go).
	targetKeys = []string{"name", "path", "probe_dir", "vantage", "vantage.process", "vantage.pid_file", "vantage.cgroup", "vantage.outside", "volume", "volume.type", "volume.size", "volume.iops", "volume.throughput",
		"volume.burst", "volume.burst.iops", "volume.burst.throughput", "volume.burst.bucket", "volume.burst.refill"}
)

// codeKeys are every key a target takes, as the reference names them ("fsync.interval"),
// from config.ProbeKinds (the keys each kind lists, each a field of config.ProbeConfig)
// and config.Limits.
func codeKeys(t *testing.T) []string {
	keys := slices.Clone(targetKeys)
	pc := reflect.TypeOf(config.ProbeConfig{})
	for i := range pc.NumField() {
		if _, ok := probeFieldKeys[pc.Field(i).Name]; !ok {
			t.Fatalf("config.ProbeConfig.%s has no YAML key in this test: add it to probeFieldKeys and docs/configuration.md", pc.Field(i).Name)
		}
	}
	for _, k := range config.ProbeKinds() {
		keys = append(keys, k.Name)
		for _, key := range k.Keys {
			if !slices.Contains(slices.Collect(maps.Values(probeFieldKeys)), key) {
				t.Fatalf("probe kind %s takes %q, which is not the key of a field of config.ProbeConfig in this test", k.Name, key)
			}
			keys = append(keys, k.Name+"."+key)
		}
	}
	lt := reflect.TypeOf(config.Limits{})
	for i := range lt.NumField() {
		key, ok := limitKeys[lt.Field(i).Name]
		if !ok {
			t.Fatalf("config.Limits.%s has no YAML key in this test: add it to limitKeys and docs/configuration.md", lt.Field(i).Name)
		}
		keys = append(keys, "limits."+key)
	}
	return keys
}

// referenceRows are the rows of docs/configuration.md's key table: key, default, meaning.
func referenceRows(t *testing.T) [][]string {
	doc := read(t, "docs/configuration.md")
	rows := tableRows(section(t, doc, "docs/configuration.md", "### Every key and its default"))
	for _, r := range rows {
		if len(r) != 3 || !strings.HasPrefix(r[0], "`") {
			t.Fatalf("docs/configuration.md: key table row %q is not | `key` | default | meaning |", r)
		}
	}
	return rows
}

func parseTarget(t *testing.T, body string) (config.Target, error) {
	t.Helper()
	cfg, err := config.Parse([]byte("targets:\n  - name: t\n    path: /srv/disk\n"+body), "/etc/diskprobe.yml")
	if cfg == nil || len(cfg.Targets) != 1 {
		return config.Target{}, fmt.Errorf("no target parsed: %v", err)
	}
	return cfg.Targets[0], err
}

// TestConfigurationReferenceIsTheCode: the reference lists every key the parser takes, no
// key it refuses, and each default as the code applies it. Each documented default is fed
// back to the parser and must give what an empty key gives.
func TestConfigurationReferenceIsTheCode(t *testing.T) {
	rows := referenceRows(t)
	var docKeys []string
	for _, r := range rows {
		docKeys = append(docKeys, strings.Trim(r[0], "`"))
	}
	want := codeKeys(t)
	for _, k := range want {
		if !slices.Contains(docKeys, k) {
			t.Errorf("docs/configuration.md does not document the key %s", k)
		}
	}
	for _, k := range docKeys {
		if !slices.Contains(want, k) {
			t.Errorf("docs/configuration.md documents %s, which the configuration does not take", k)
		}
	}

	for _, r := range rows {
		key, def := strings.Trim(r[0], "`"), r[1]
		parent, field, nested := strings.Cut(key, ".")
		kind := config.LookupProbe(parent)
		switch {
		case kind != nil && !nested:
			// A probe key: its default says which target types get it when none is named.
			for kk, word := range map[config.TargetType]string{config.TypeDirectory: "directories", config.TypeBlockDevice: "block devices"} {
				if on := config.OnByDefault(kind, kk); on != strings.Contains(def, word) {
					t.Errorf("docs/configuration.md: %s: default %q; on by default for %s: %v", key, def, kk, on)
				}
			}
			if kind.DefaultOn == 0 && def != "off" {
				t.Errorf("docs/configuration.md: %s is on for no target type by default; the reference says %q", key, def)
			}
		case kind != nil:
			value := strings.Trim(def, "`")
			got, err := parseTarget(t, fmt.Sprintf("    %s: {%s: %s}\n", parent, field, value))
			if err != nil {
				t.Errorf("docs/configuration.md: %s: %s does not parse: %v", key, value, err)
				continue
			}
			if *got.Probe[parent] != kind.Defaults {
				t.Errorf("docs/configuration.md: %s: default %s, the code's is %+v", key, value, kind.Defaults)
			}
		case parent == "limits":
			value := strings.Trim(def, "`")
			got, err := parseTarget(t, fmt.Sprintf("    limits: {%s: %s}\n", field, value))
			if err != nil {
				t.Errorf("docs/configuration.md: %s: %s does not parse: %v", key, value, err)
				continue
			}
			if got.Limits != config.DefaultLimits {
				t.Errorf("docs/configuration.md: %s: default %s, the code's limits are %+v", key, value, config.DefaultLimits)
			}
		}
	}
}

// TestConfigurationExampleParses: the annotated example in docs/configuration.md is a
// valid configuration.
func TestConfigurationExampleParses(t *testing.T) {
	doc := read(t, "docs/configuration.md")
	blocks := codeBlocks(doc, "yaml")
	if len(blocks) == 0 {
		t.Fatal("docs/configuration.md has no yaml example")
	}
	for _, b := range blocks {
		if _, err := config.Parse([]byte(b), "/etc/diskprobe_exporter/diskprobe.yml"); err != nil {
			t.Errorf("docs/configuration.md example does not parse: %v\n%s", err, b)
		}
	}
}
