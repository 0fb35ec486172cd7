package charts

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestValuesTypoFailsInstallNamingTheKey: values.schema.json closes the top level and the
// nested objects users set, so a misspelt key fails helm install/template with the key's
// name instead of being ignored.
func TestValuesTypoFailsInstallNamingTheKey(t *testing.T) {
	for _, c := range []struct{ set, key string }{
		{"imagee.tag=1.0.0", "imagee"},
		{"image.tagg=1.0.0", "tagg"},
		{"serviceMonitor.intervall=1m", "intervall"},
		{"serviceMonitor.forceEnabled=true", "forceEnabled"},
		{"podMonitor.enabeld=true", "enabeld"},
		{"prometheusRule.lables.release=x", "lables"},
		{"dashboards.lable=x", "lable"},
		{"service.prot=80", "prot"},
		{"serviceAccount.craete=false", "craete"},
		{"webConfig.secret=x", "secret"},
		{"tolerration[0].key=x", "tolerration"},
		{"networkPolicy.enabeld=true", "enabeld"},
		{"rulesConfigMap.namspace=x", "namspace"},
		{"monitoringLabel.release=x", "monitoringLabel"},
		{"podMonitor.tlsconfig.x=y", "tlsconfig"},
	} {
		t.Run(c.key, func(t *testing.T) {
			_, stderr, err := helmRun(t, templateArgs("probe", chartDir, nil, []string{c.set})...)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded: the misspelt key is ignored", c.set)
			}
			if !strings.Contains(stderr, "'"+c.key+"'") {
				t.Errorf("helm template --set %s fails without naming %q:\n%s", c.set, c.key, stderr)
			}
		})
	}
	// The keys the chart reads in config; the rest of config the exporter checks itself.
	_, stderr, err := helmRun(t, templateArgs("probe", chartDir, nil, []string{"config.targets[0].name=x"})...)
	if err == nil || !strings.Contains(stderr, "path") {
		t.Errorf("a config target without a path renders (err %v):\n%s", err, stderr)
	}
}

// TestEveryValuesFileInTheRepositoryMeetsTheSchema: the chart's presets and the test values
// files (which README and examples point users at) pass values.schema.json.
func TestEveryValuesFileInTheRepositoryMeetsTheSchema(t *testing.T) {
	files, _ := filepath.Glob(chartDir + "/values*.yaml")
	testdata, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, testdata...)
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if _, stderr, err := helmRun(t, templateArgs("probe", chartDir, []string{f}, nil)...); err != nil {
			t.Errorf("%s: %v\n%s", f, err, stderr)
		}
	}
}
