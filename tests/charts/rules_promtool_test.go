package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The rules as the chart renders them are not the shipped file: peerGroupLabels,
// peerGroupSelector and diskprobeSelector are substituted into them. The promtool cases in
// alerts/tests/chart/ run on those renderings (the chart's own rule-file ConfigMap, which is
// the PrometheusRule's spec), on each supported Prometheus, so that a rule or an annotation
// that only works with the default labels fails here.
var renderedRuleCases = []struct {
	name  string
	files []string
	set   []string
	test  string // under alerts/tests/chart/
}{
	{"etcd preset", []string{chartDir + "/values-etcd.yaml"}, nil, "etcd-preset.test.yml"},
	{"etcd preset, a vantage inside etcd", []string{chartDir + "/values-etcd.yaml"}, nil, "etcd-preset-vantage.test.yml"},
	{"groups by namespace", nil, []string{`peerGroupLabels=job\, namespace\, target`, `peerGroupSelector=target="etcd"`}, "namespace-groups.test.yml"},
}

func TestRenderedRulesPassPromtoolUnitTests(t *testing.T) {
	servers := framework.PrometheusServers(t)
	for _, c := range renderedRuleCases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, "probe", c.files, append([]string{"rulesConfigMap.enabled=true"}, c.set...))
			rules := r.configMaps["probe-diskprobe-exporter-rules"].Data["diskprobe.rules.yml"]
			if rules == "" {
				t.Fatal("the chart rendered no rule file")
			}
			test, err := os.ReadFile(testenv.RepoPath("alerts", "tests", "chart", c.test))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(test), "  - rendered.rules.yml\n") {
				t.Fatalf("%s: its rule_files must name rendered.rules.yml, the chart's rendering", c.test)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rendered.rules.yml"), []byte(rules), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, c.test)
			if err := os.WriteFile(path, test, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, srv := range servers {
				out, err := exec.Command(srv.Promtool, "test", "rules", path).CombinedOutput()
				if err != nil {
					t.Errorf("promtool %s test rules %s on the chart's rules (%s): %v\n%s", srv.Name, c.test, c.name, err, out)
				}
			}
		})
	}
}
