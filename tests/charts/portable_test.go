package charts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestMonitoringObjectsRenderOnlyWhereTheClusterServesThem: on a cluster without
// prometheus-operator's CRDs, a ServiceMonitor, PodMonitor or PrometheusRule fails the whole
// install with "no matches for kind"; each renders only when its kind is served, or when
// forced with forceEnable (helm template, which knows no cluster).
func TestMonitoringObjectsRenderOnlyWhereTheClusterServesThem(t *testing.T) {
	podMonitorValues := []string{"testdata/webconfig-values.yaml"}
	for _, c := range []struct {
		name                     string
		files, set               []string
		apis                     []string
		wantSM, wantPM, wantRule bool
	}{
		{name: "no operator", wantSM: false, wantRule: false},
		{name: "no operator, PodMonitor values", files: podMonitorValues},
		{name: "operator", apis: monitoringAPIs, wantSM: true, wantRule: true},
		{name: "operator, PodMonitor values", files: podMonitorValues, apis: monitoringAPIs, wantPM: true, wantRule: true},
		{name: "only ServiceMonitor served", apis: monitoringAPIs[:1], wantSM: true},
		{name: "only PrometheusRule served", apis: monitoringAPIs[2:], wantRule: true},
		{name: "forced", set: []string{"serviceMonitor.forceEnable=true", "prometheusRule.forceEnable=true"}, wantSM: true, wantRule: true},
		{name: "PodMonitor forced", set: []string{"podMonitor.forceEnable=true"}, wantPM: true},
		{name: "disabled though served", apis: monitoringAPIs, set: []string{"serviceMonitor.enabled=false", "prometheusRule.enabled=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := templateArgs("probe", chartDir, c.files, c.set)
			for _, api := range c.apis {
				args = append(args, "--api-versions", api)
			}
			r := decode(t, helm(t, args...))
			if got := r.serviceMonitor != nil; got != c.wantSM {
				t.Errorf("ServiceMonitor rendered %v, want %v", got, c.wantSM)
			}
			if got := r.podMonitor != nil; got != c.wantPM {
				t.Errorf("PodMonitor rendered %v, want %v", got, c.wantPM)
			}
			if got := r.rule != nil; got != c.wantRule {
				t.Errorf("PrometheusRule rendered %v, want %v", got, c.wantRule)
			}
			if r.podMonitor != nil && r.service != nil {
				t.Error("a Service beside the PodMonitor that replaces it")
			}
		})
	}
}

// chartCopies are the chart's copies of the shipped rules and dashboards, with their sources
// (relative to the repository root), as `make chart-files` writes them.
func chartCopies(t *testing.T) map[string]string {
	t.Helper()
	copies := map[string]string{"files/diskprobe.rules.yml": "alerts/diskprobe.rules.yml"}
	dashboards, err := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	for _, d := range dashboards {
		copies["files/dashboards/"+filepath.Base(d)] = "dashboards/" + filepath.Base(d)
	}
	return copies
}

// TestChartFilesAreCopiesOfAlertsAndDashboards: alerts/ and dashboards/ are the one source;
// the chart holds real copies (helm warns on symlinks, and a chart directory copied alone has
// nothing to point to), which must not drift, and nothing else in files/.
func TestChartFilesAreCopiesOfAlertsAndDashboards(t *testing.T) {
	const fix = "run `make chart-files`"
	copies := chartCopies(t)
	for cp, src := range copies {
		path := filepath.Join(chartDir, cp)
		fi, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s/%s is missing (the chart's copy of %s): %s", chartDir, cp, src, fix)
			continue
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("%s/%s is not a regular file (%s): helm warns on symlinks and a copied chart loses them; %s", chartDir, cp, fi.Mode().Type(), fix)
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(testenv.RepoPath(src))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s, its source: %s", path, src, fix)
		}
	}
	err := filepath.Walk(filepath.Join(chartDir, "files"), func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		if _, ok := copies[rel]; !ok {
			t.Errorf("%s has no source in alerts/ or dashboards/: %s", path, fix)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChartRendersWithoutWarningsPackagedAndCopiedAlone: how users get the chart — `helm
// package`'s archive, and the chart directory copied alone (GitOps repositories vendor it so)
// — both render, with no warning, the rules and every dashboard.
func TestChartRendersWithoutWarningsPackagedAndCopiedAlone(t *testing.T) {
	tmp := t.TempDir()
	_, stderr := helmStderr(t, "package", chartDir, "--destination", filepath.Join(tmp, "pkg"))
	if stderr != "" {
		t.Errorf("helm package warns:\n%s", stderr)
	}
	packaged, err := filepath.Glob(filepath.Join(tmp, "pkg", "*.tgz"))
	if err != nil || len(packaged) != 1 {
		t.Fatalf("helm package wrote %v (%v), want one archive", packaged, err)
	}
	copied := filepath.Join(tmp, "vendor", chartDir)
	if err := os.MkdirAll(filepath.Dir(copied), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", chartDir, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp -r: %v\n%s", err, out)
	}
	dashboards, _ := filepath.Glob(testenv.RepoPath("dashboards", "*.json"))
	for name, chart := range map[string]string{"helm package": packaged[0], "cp -r": copied} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr := helmStderr(t, templateArgs("probe", chart, nil, []string{"prometheusRule.forceEnable=true"})...)
			if stderr != "" {
				t.Errorf("helm template warns:\n%s", stderr)
			}
			r := decode(t, stdout)
			if r.rule == nil || len(r.rule.Spec.Groups) == 0 {
				t.Error("no PrometheusRule groups rendered")
			}
			n := 0
			for _, cm := range r.configMaps {
				if cm.Labels["grafana_dashboard"] != "1" {
					continue
				}
				for _, data := range cm.Data {
					if strings.TrimSpace(data) != "" {
						n++
					}
				}
			}
			if n != len(dashboards) {
				t.Errorf("%d dashboard ConfigMaps with content, want %d (dashboards/*.json)", n, len(dashboards))
			}
		})
	}
}
