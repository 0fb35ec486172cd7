package docs

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestHostEtcdTargetsAreCappedAndCosted: the chart's etcd preset caps what the probes may take
// of etcd's disk (limits); the README's host target, the one users copy, set no limits, so its
// first start wrote 384 MiB at the default 50 MiB/s into etcd's disk, and nothing said what a
// target costs. Each etcd target snippet for a host carries the preset's limits and is
// followed by its cost.
func TestHostEtcdTargetsAreCappedAndCosted(t *testing.T) {
	var preset struct {
		Config struct {
			Targets []struct {
				Name   string         `yaml:"name"`
				Limits map[string]any `yaml:"limits"`
			} `yaml:"targets"`
		} `yaml:"config"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "charts/diskprobe-exporter/values-etcd.yaml")), &preset); err != nil || len(preset.Config.Targets) == 0 {
		t.Fatalf("values-etcd.yaml: %v", err)
	}
	want := preset.Config.Targets[0].Limits
	for _, name := range []string{"README.md", "docs/install.md"} {
		doc := read(t, name)
		n := 0
		for _, block := range codeBlocks(doc, "yaml") {
			if !strings.Contains(block, "probe_dir: /var/lib/diskprobe-etcd") {
				continue
			}
			n++
			var targets []struct {
				Limits map[string]any `yaml:"limits"`
			}
			if err := yaml.Unmarshal([]byte(block), &targets); err != nil || len(targets) != 1 {
				t.Errorf("%s: the etcd target snippet does not parse as one target: %v", name, err)
				continue
			}
			for k, v := range want {
				if targets[0].Limits[k] != v {
					t.Errorf("%s: the etcd target's limits.%s is %v; the chart's etcd preset caps it at %v", name, k, targets[0].Limits[k], v)
				}
			}
			_, after, _ := strings.Cut(doc, block)
			if !strings.Contains(after[:min(len(after), 1500)], "What it costs etcd's disk: 448 MiB") {
				t.Errorf("%s: the etcd target snippet is not followed by what it costs etcd's disk", name)
			}
		}
		if n == 0 {
			t.Errorf("%s has no etcd target snippet", name)
		}
	}
}
