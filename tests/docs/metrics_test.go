package docs

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/diskprobe/diskprobe_exporter/arrival"
	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// documentedMetric is a row of docs/metrics.md's table.
type documentedMetric struct {
	typ    string
	labels []string
}

func documentedMetrics(t *testing.T) map[string]documentedMetric {
	doc := read(t, "docs/metrics.md")
	out := map[string]documentedMetric{}
	for _, r := range tableRows(section(t, doc, "docs/metrics.md", "### Every metric")) {
		if len(r) != 4 {
			t.Fatalf("docs/metrics.md: row %q is not | `metric` | type | labels | meaning |", r)
		}
		var labels []string
		for l := range strings.SplitSeq(r[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		out[strings.Trim(r[0], "`")] = documentedMetric{typ: r[1], labels: labels}
	}
	return out
}

// TestMetricsReferenceIsWhatTheExporterExposes runs the real binary with every probe kind
// on a directory and compares docs/metrics.md with its /metrics (names, types, label sets)
// and with the registered collectors (a series that appears only on an event, such as a
// skip or a recognised ceiling, is registered before it is exposed). The target has a
// volume block, so that the volume's series are exposed. Both lists are printed on a mismatch.
func TestMetricsReferenceIsWhatTheExporterExposes(t *testing.T) {
	doc := documentedMetrics(t)
	registered := map[string]bool{}
	for _, n := range collector.MetricNames() {
		registered[n] = true
	}

	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: docs
    path: %s
    fsync:    {interval: 1s, ops: 2, file_size: 1MiB}
    randread: {interval: 1s, ops: 2, file_size: 1MiB}
    seqread:  {interval: 1s, bytes: 1MiB}
    seqwrite: {interval: 1s, bytes: 1MiB}
    commit:   {interval: 1s, ops: 2, file_size: 2MiB}
    limits:   {min_free: 1MiB}
    volume:   {iops: 100, burst: {iops: 1000, bucket: 60000}}
`, t.TempDir()))
	e := framework.StartExporter(t, cfg)
	families := framework.WaitMetric(t, e, 30*time.Second, "a sample of every probe", func(f map[string]*dto.MetricFamily) bool {
		for _, name := range []string{"diskprobe_fdatasync_duration_seconds", "diskprobe_read_duration_seconds", "diskprobe_sequential_bytes_total", "diskprobe_commit_duration_seconds"} {
			if _, ok := f[name]; !ok {
				return false
			}
		}
		v, _ := framework.Value(f, "diskprobe_sequential_bytes_total", map[string]string{"direction": "write"})
		return v > 0
	})

	exposed := map[string]*dto.MetricFamily{}
	for name, f := range families {
		if strings.HasPrefix(name, "diskprobe_") {
			exposed[name] = f
		}
	}
	// The arrival command runs against a Kubernetes API server only: its metrics are
	// gathered from the registry it builds (every class's series exist from the start).
	arrivalReg := prometheus.NewRegistry()
	if _, err := arrival.New(nil, arrival.Config{Classes: []string{"docs"}}, arrivalReg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	arrivalFamilies, err := arrivalReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range arrivalFamilies {
		exposed[f.GetName()] = f
	}
	for _, n := range arrival.MetricNames() {
		registered[n] = true
	}
	defer func() {
		if t.Failed() {
			t.Logf("exposed:    %s", strings.Join(slices.Sorted(maps.Keys(exposed)), " "))
			t.Logf("registered: %s", strings.Join(slices.Sorted(maps.Keys(registered)), " "))
			t.Logf("documented: %s", strings.Join(slices.Sorted(maps.Keys(doc)), " "))
		}
	}()

	for name, f := range exposed {
		d, ok := doc[name]
		if !ok {
			t.Errorf("%s is exposed but not in docs/metrics.md", name)
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); typ != d.typ {
			t.Errorf("docs/metrics.md: %s is a %s, the exporter serves a %s", name, d.typ, typ)
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			slices.Sort(labels)
			if !slices.Equal(labels, d.labels) {
				t.Errorf("docs/metrics.md: %s has labels %v, the exporter serves %v", name, d.labels, labels)
				break
			}
		}
	}
	for name := range registered {
		if _, ok := doc[name]; !ok {
			t.Errorf("%s is registered but not in docs/metrics.md", name)
		}
	}
	for name := range doc {
		if _, ok := exposed[name]; !ok && !registered[name] {
			t.Errorf("docs/metrics.md names %s, which the exporter neither exposes nor registers", name)
		}
	}
}
