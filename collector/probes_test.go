package collector

import (
	"testing"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// TestEveryConfigKindIsBuiltAndRecorded: a kind added to config.ProbeKinds without its
// collector/probe_<name>.go would parse, then crash the runner at its first target.
func TestEveryConfigKindIsBuiltAndRecorded(t *testing.T) {
	for _, k := range config.ProbeKinds {
		if pk, ok := probeKinds[k.Name]; !ok || pk.build == nil || pk.metrics == nil {
			t.Errorf("probe kind %q has no build or metrics in collector (registerProbe in collector/probe_%s.go)", k.Name, k.Name)
		}
	}
	if len(probeKinds) != len(config.ProbeKinds) {
		t.Errorf("%d kinds registered in collector, %d in config.ProbeKinds", len(probeKinds), len(config.ProbeKinds))
	}
}

// TestRegisteringAKindUnknownToConfigPanics: the collector side of a kind without its
// schema could never be configured; it fails at start rather than silently.
func TestRegisteringAKindUnknownToConfigPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registerProbe accepted a kind that config.ProbeKinds does not have")
		}
	}()
	registerProbe("randread_qd", probeKind{})
}
