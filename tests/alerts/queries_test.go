package alerts

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/diskprobe/diskprobe_exporter/collector"
)

// namedExpr is a PromQL expression with the place it came from.
type namedExpr struct{ where, expr string }

// everyExpression is every rule expression and every dashboard query, with Grafana's
// variables replaced by values the PromQL parser accepts.
func everyExpression(t *testing.T) []namedExpr {
	t.Helper()
	var out []namedExpr
	for _, path := range ruleFiles(t) {
		for _, g := range loadRules(t, path).Groups {
			for _, r := range g.Rules {
				out = append(out, namedExpr{path + ": " + r.Record + r.Alert, r.Expr})
			}
		}
	}
	for _, q := range dashboardQueries(t) {
		out = append(out, namedExpr{q.Where, expandGrafana(q.Expr, "1m", "some-value")})
	}
	return out
}

// metricNames returns the names of the series an expression selects.
func metricNames(e parser.Expr) []string {
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}

// otherExporters are the series of other exporters the rules and dashboards read when they
// are there. smartctl_exporter's, named as in its metrics.go (github.com/prometheus-community/
// smartctl_exporter at c0fe431c02002599a00f87cfd62859c52d14f0c8), for SMART's opinion in the
// hardware alerts and on the target dashboard; absent, the rules behave as without them
// (alerts/tests/diskprobe.peers.test.yml). node_exporter's diskstats, as Debian's
// prometheus-node-exporter 1.5.0 exposes them (the end-to-end test scrapes it), for the
// workload's own latency on the target dashboard. kube-state-metrics' DaemonSet status, the
// inventory DiskprobeDaemonSetIncomplete compares the running exporters with (absent: silent,
// alerts/tests/diskprobe.exporters.test.yml).
var otherExporters = map[string]bool{
	"smartctl_device":                                true,
	"smartctl_device_media_errors":                   true,
	"smartctl_device_critical_warning":               true,
	"smartctl_device_available_spare":                true,
	"smartctl_device_available_spare_threshold":      true,
	"smartctl_device_smart_status":                   true,
	"node_disk_read_time_seconds_total":              true,
	"node_disk_reads_completed_total":                true,
	"node_disk_write_time_seconds_total":             true,
	"node_disk_writes_completed_total":               true,
	"kube_daemonset_status_desired_number_scheduled": true,
	"kube_daemonset_status_number_available":         true,
	"kube_daemonset_status_updated_number_scheduled": true,
}

// arrivalSeries are the arrival prober's (`diskprobe_exporter arrival`, package arrival/), a
// command of its own with a registry of its own, not the collector's: the storage-class
// rules and the fleet dashboard read them.
var arrivalSeries = map[string]bool{
	"diskprobe_storageclass_arrival_seconds_bucket":                 true,
	"diskprobe_storageclass_arrival_seconds_count":                  true,
	"diskprobe_storageclass_arrival_seconds_sum":                    true,
	"diskprobe_storageclass_arrival_attempts_total":                 true,
	"diskprobe_storageclass_arrival_failures_total":                 true,
	"diskprobe_storageclass_arrival_last_success_timestamp_seconds": true,
}

// prometheusSeries are the series Prometheus makes itself: `up` for every scrape, and
// ALERTS for every pending or firing alert, which the dashboards' annotations and the
// fleet table's alert count read.
var prometheusSeries = map[string]bool{"up": true, "ALERTS": true}

// TestQueriesNameOnlyMetricsTheExporterRegisters parses every rule and dashboard query with
// Prometheus's own parser and checks each metric it selects against the exporter's registry
// (collector.MetricNames, read from the real collectors' descriptors): a renamed metric
// breaks this test, not a dashboard in production. Series made by the recording rules, by
// Prometheus itself (prometheusSeries) and by other exporters (otherExporters) are allowed
// too. It also checks the converse: every metric the exporter registers is shown on some
// dashboard.
func TestQueriesNameOnlyMetricsTheExporterRegisters(t *testing.T) {
	exported := map[string]bool{}
	for _, n := range collector.MetricNames() {
		exported[n] = true
	}
	if len(exported) == 0 {
		t.Fatal("collector.MetricNames() is empty")
	}
	recorded := recordedNames(t)
	onDashboards := map[string]bool{}
	dashboards := map[string]bool{}
	for _, q := range dashboardQueries(t) {
		dashboards[q.Where] = true
	}

	for _, ne := range everyExpression(t) {
		e, err := parser.ParseExpr(ne.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", ne.where, err, ne.expr)
			continue
		}
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("%s: selects no metric: %s", ne.where, ne.expr)
		}
		for _, name := range names {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && exported[trimmed] {
					base = trimmed
				}
			}
			switch {
			case name == "":
				t.Errorf("%s: a selector without a metric name: %s", ne.where, ne.expr)
			case exported[base]:
				if dashboards[ne.where] {
					onDashboards[base] = true
				}
			case recorded[name], prometheusSeries[name], otherExporters[name], arrivalSeries[name]:
			default:
				t.Errorf("%s: metric %q is not registered by the exporter (collector.MetricNames) nor recorded by a rule", ne.where, name)
			}
		}
	}
	for _, name := range sortedKeys(exported) {
		if !onDashboards[name] {
			t.Errorf("metric %s is exported but shown on no dashboard", name)
		}
	}
}

func TestGrafanaVariablesExpandToValidPromQL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`rate(x{job=~"$job", target=~"${target}"}[$__rate_interval])`, `rate(x{job=~".*", target=~".*"}[1m])`},
		{`sum(increase(x{instance=~"[[instance]]"}[$__range]))`, `sum(increase(x{instance=~".*"}[1m]))`},
		{`x{job=~"${job:regex}"}`, `x{job=~".*"}`},
	} {
		if got := expandGrafana(c.in, "1m", ".*"); got != c.want {
			t.Errorf("expandGrafana(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if expr, ok := grafanaFunctionArg(`label_values(diskprobe_target_info{job=~"$job"}, target)`); !ok || expr != `diskprobe_target_info{job=~"$job"}` {
		t.Errorf("label_values: got %q %v", expr, ok)
	}
}
