package alerts

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// shortFor is the `for:` every alert gets in the end-to-end copy of the rules, so that an
// alert that would take 15 minutes to fire in production fires within the test.
const shortFor = "5s"

// e2eJob is the scrape job name; it follows the documented convention (contains "diskprobe").
const e2eJob = "diskprobe"

// peersJob scrapes the same exporter as three instances: a group of peers for the peer panels.
const peersJob = "diskprobe-peers"

// TestRulesAndDashboardsWorkAgainstRealPrometheusAndExporter runs the real exporter on a
// temporary directory and an ext4 loop device, scraped every second by each supported
// Prometheus (Debian's 2.42 and Prometheus 3, side by side) with the rule files loaded. After a short warm-up every dashboard query and every
// recording rule must return at least one series and every rule must evaluate without error
// (node_exporter, where installed, is scraped too, for the workload panel, and the exporter a
// second time as a group of three peers; the queries that need smartctl_exporter are named in
// dashboardQueriesEmptyByDesign).
// Then the loop device is throttled to 20 writes/s with a blkio cgroup holding the exporter,
// and the fdatasync-above-10ms alert must reach `firing`; then the dashboards' queries of
// firing alerts (the annotations, the fleet table's count) must return series too.
func TestRulesAndDashboardsWorkAgainstRealPrometheusAndExporter(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "prometheus", "losetup", "mkfs.ext4", "mount", "umount")
	began := time.Now()

	dev, loopDir := testenv.LoopExt4(t, 256<<20)
	plainDir := t.TempDir()
	// tmpfs refuses O_DIRECT, which the read probes need; there the plain target only syncs.
	plainReads := "randread: {interval: 1s, ops: 10, block_size: 4KiB, file_size: 16MiB}\n    seqread:  {interval: 2s, bytes: 4MiB, block_size: 1MiB}"
	var st unix.Statfs_t
	if unix.Statfs(plainDir, &st) == nil && st.Type == unix.TMPFS_MAGIC {
		plainReads = ""
	}
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: loop
    path: %s
    fsync:    {interval: 1s, ops: 20, block_size: 2300, file_size: 4MiB}
    randread: {interval: 1s, ops: 10, block_size: 4KiB, file_size: 16MiB}
    seqread:  {interval: 2s, bytes: 4MiB, block_size: 1MiB}
    seqwrite: {interval: 2s, bytes: 4MiB, block_size: 1MiB}
    commit:   {interval: 1s, ops: 10, pages: 10, file_size: 8MiB}
    limits:   {timeout: 30s, min_free: 0}
  - name: plain
    path: %s
    fsync:    {interval: 1s, ops: 10, block_size: 2300, file_size: 4MiB}
    %s
    limits:   {timeout: 30s, min_free: 0}
`, loopDir, plainDir, plainReads))
	exporter := framework.StartExporter(t, cfg)
	// Each supported Prometheus scrapes the same exporter with the same rules, side by side,
	// and node_exporter where installed, for the target dashboard's workload panel.
	// The same exporter is scraped a second time as a group of three peers (peersJob), so
	// that the peer rules and panels have a group; the alert checked below is e2eJob's.
	// The peers carry a peer_group label: the peer rules take members from series that have one.
	jobs := map[string]string{e2eJob: exporter.Addr}
	var peers strings.Builder
	fmt.Fprintf(&peers, "  - job_name: %q\n    static_configs:\n", peersJob)
	for _, instance := range []string{"peer-a", "peer-b", "peer-c"} {
		fmt.Fprintf(&peers, "      - targets: [%q]\n        labels: {instance: %q, peer_group: \"e2e\"}\n", exporter.Addr, instance)
	}
	emptyQueries := dashboardQueriesEmptyByDesign
	if addr, ok := startNodeExporter(t); ok {
		jobs["node"] = addr
	} else {
		t.Logf("no %s: the node_exporter queries are not required to return series", nodeExporterBinary)
		emptyQueries = maps.Clone(emptyQueries)
		maps.Copy(emptyQueries, nodeExporterQueries)
	}
	for where := range emptyQueries {
		if !slices.ContainsFunc(dashboardQueries(t), func(q query) bool { return q.Where == where }) {
			t.Errorf("dashboardQueriesEmptyByDesign names %q, which no dashboard has", where)
		}
	}
	servers := framework.PrometheusServers(t)
	rules := rulesWithShortFor(t)
	proms := make([]*framework.Prometheus, len(servers))
	for i, srv := range servers {
		proms[i] = framework.StartPrometheus(t, framework.PrometheusOptions{Binary: srv.Bin, Jobs: jobs, Rules: rules,
			ScrapeConfigs: peers.String()})
	}
	t.Logf("exporter and %d prometheus servers up after %v", len(proms), time.Since(began).Round(time.Millisecond))

	// Warm-up: every dashboard query, every recording rule, every rule healthy, on each server.
	// The queries of firing alerts (ALERTS) are checked once an alert fires, below.
	var checks, alertChecks []namedExpr
	for _, q := range dashboardQueries(t) {
		switch {
		case emptyQueries[q.Where] != "":
		case strings.Contains(q.Expr, "ALERTS"):
			alertChecks = append(alertChecks, namedExpr{q.Where, expandGrafana(q.Expr, "1m", ".*")})
		default:
			checks = append(checks, namedExpr{q.Where, expandGrafana(q.Expr, "1m", ".*")})
		}
	}
	for _, name := range sortedKeys(recordedNames(t)) {
		checks = append(checks, namedExpr{"recording rule " + name, name})
	}
	var empty, unhealthy []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		empty, unhealthy = empty[:0], unhealthy[:0]
		metrics := scrapeText(exporter.Addr)
		for i, prom := range proms {
			for _, c := range checks {
				if emptyByDesign(c.expr, metrics) || cpuWaitUnmeasured(c.expr, metrics) || pressureUnmeasured(c.expr, metrics) {
					continue
				}
				n, err := prom.SeriesCount(c.expr)
				if err != nil {
					t.Fatalf("prometheus %s: %s: %v\n%s", servers[i].Name, c.where, err, c.expr)
				}
				if n == 0 {
					empty = append(empty, "prometheus "+servers[i].Name+": "+c.where+": "+c.expr)
				}
			}
			for _, r := range unhealthyRules(t, prom) {
				unhealthy = append(unhealthy, "prometheus "+servers[i].Name+": "+r)
			}
		}
		if len(empty) == 0 && len(unhealthy) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s of warm-up:\n%d queries return no series:\n  %s\n%d rules not healthy:\n  %s\nexporter /metrics:\n%s",
				len(empty), strings.Join(empty, "\n  "), len(unhealthy), strings.Join(unhealthy, "\n  "), scrapeText(exporter.Addr))
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d dashboard queries and recording rules return series, all rules healthy, on %d servers, after %v",
		len(checks), len(proms), time.Since(began).Round(time.Millisecond))

	const alert = "DiskprobeFdatasyncP99AboveEtcdTarget"
	const p99 = `target:diskprobe_fdatasync_duration_seconds:quantile_rate5m{quantile="0.99", target="loop"}`
	for i, prom := range proms {
		before, _ := prom.Value(p99)
		t.Logf("prometheus %s before throttling: loop fdatasync p99 over 5m %.2fms, %s %q", servers[i].Name, before*1000, alert, alertState(t, prom, alert, "loop"))
	}

	// A failing SSD, from the exporter's side: 20 writes/s on the loop device.
	cg := testenv.ThrottleWrites(t, dev, 20)
	cg.Add(exporter.Pid())
	throttled := time.Now()
	for i, prom := range proms {
		testenv.WaitFor(t, 90*time.Second, alert+" firing for target loop on prometheus "+servers[i].Name, func() bool {
			return alertState(t, prom, alert, "loop") == "firing"
		})
		v, _ := prom.Value(p99)
		t.Logf("prometheus %s: %s firing %v after throttling (fdatasync p99 over 5m: %.1fms)",
			servers[i].Name, alert, time.Since(throttled).Round(time.Millisecond), v*1000)
		for _, c := range alertChecks {
			n, err := prom.SeriesCount(c.expr)
			if err != nil || n == 0 {
				t.Errorf("prometheus %s, %s firing: %s: %d series, %v\n%s", servers[i].Name, alert, c.where, n, err, c.expr)
			}
			// The fleet table counts it on the disk's row.
			if strings.Contains(c.where, "diskprobe-fleet.json: panel") {
				if v, err := prom.Value(fmt.Sprintf(`max(%s and on (job, target) {job=%q, target="loop"})`, c.expr, e2eJob)); err != nil || v < 1 {
					t.Errorf("prometheus %s, %s firing: %s counts %v alerts for target loop (%v)", servers[i].Name, alert, c.where, v, err)
				}
			}
		}
	}
	t.Logf("%d dashboard queries of firing alerts return series on %d servers", len(alertChecks), len(proms))
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// emptyByDesign tells the recording rules that one exporter on a healthy host leaves empty:
// they need a group of 3 peers, smartctl_exporter, a starved host or a whole group slow
// (alerts/tests/diskprobe.peers.test.yml fills them), the day before the last hour (the
// day-back medians), an exporter gone from its job (alerts/tests/diskprobe.exporters.test.yml),
// a device capped at its ceiling (alerts/tests/diskprobe.capped.test.yml), a target probing
// from inside another process's cgroup beside its outside twin
// (alerts/tests/diskprobe.vantage.test.yml), or, for the CPU-wait share, a kernel with
// schedstat, which the exporter's metrics say.
func emptyByDesign(name, metrics string) bool {
	switch name {
	case "instance:diskprobe_fdatasync_slowdown_vs_peers:ratio", "instance:diskprobe_fdatasync_slowdown_vs_peers:ratio_q40_2h",
		"serial:smartctl_device_trouble:max", "target:diskprobe_fdatasync_not_the_disk:max1h",
		"device:smartctl_device_media_errors:sampled5m", "device:smartctl_device_media_errors:increase1d",
		"target:diskprobe_fsync_cpu_wait:ratio_rate5m_max10m", "target:diskprobe_commit_cpu_wait:ratio_rate5m_max10m",
		"target_direction:diskprobe_sequential_throughput_bytes_per_second:median1d_offset1h",
		"target:diskprobe_device_other_iops:avg1h_median1d_offset1h",
		"instance:diskprobe_exporter_gone:former_size", "instance:diskprobe_exporter_gone:since_timestamp",
		"target:diskprobe_device_at_ceiling:max5m":
		return true
	case "target:diskprobe_fsync_cpu_wait:ratio_rate5m", "target:diskprobe_commit_cpu_wait:ratio_rate5m", "target:diskprobe_fdatasync_host_starved:bool", "target:diskprobe_fdatasync_host_starved:min5m":
		return !strings.Contains(metrics, "diskprobe_probe_cpu_wait_seconds_total")
	}
	return strings.HasPrefix(name, "peers:") || strings.HasPrefix(name, "target_view:") || strings.HasPrefix(name, "target:diskprobe_vantage:") ||
		storageClassSeries(name)
}

// storageClassSeries tells the storage-class group's records: they need the chart's probes of a
// StorageClass (series with storage_class) or its arrival prober, which this test does not run
// (alerts/tests/diskprobe.storageclasses.test.yml fills them).
func storageClassSeries(name string) bool {
	return strings.HasPrefix(name, "storage_class:") || strings.HasPrefix(name, "storage_class_stage:") ||
		strings.HasPrefix(name, "target:diskprobe_storageclass")
}

// dashboardQueriesEmptyByDesign names the dashboard queries that this test leaves empty (no
// smartctl_exporter, every instance selected), and why; the test checks that each is still
// on a dashboard.
var dashboardQueriesEmptyByDesign = map[string]string{
	// The other members of this member's group: empty when every instance is selected, as here.
	`diskprobe-target.json: panel "This member against its peers" C`: "one instance selected",
	`diskprobe-target.json: panel "SMART (smartctl_exporter)" A`:     "smartctl_exporter",
	`diskprobe-target.json: panel "SMART (smartctl_exporter)" B`:     "smartctl_exporter",
	`diskprobe-target.json: panel "SMART (smartctl_exporter)" C`:     "smartctl_exporter",
	`diskprobe-target.json: panel "SMART (smartctl_exporter)" D`:     "smartctl_exporter",
	`diskprobe-target.json: panel "SMART (smartctl_exporter)" E`:     "smartctl_exporter",
	// A device held at a ceiling, a volume block, a day of history: none here (the loop
	// device is not throttled; alerts/tests/diskprobe.capped.test.yml has them).
	`diskprobe-target.json: panel "Others' IOPS on the device, and its ceiling" B`: "a capped device",
	`diskprobe-target.json: panel "Others' IOPS on the device, and its ceiling" C`: "a volume block",
	`diskprobe-target.json: panel "Sequential throughput (last run)" C`:            "a capped device",
	`diskprobe-target.json: panel "Sequential throughput (last run)" D`:            "a volume block",
	`diskprobe-target.json: panel "Burst credits: balance and time to empty" A`:    "a volume block with a bucket",
	`diskprobe-target.json: panel "Burst credits: balance and time to empty" B`:    "a volume block with a bucket",
	`diskprobe-target.json: panel "Capped, busy or sick" B`:                        "a day of history",
	`diskprobe-target.json: panel "Target" C`:                                      "a volume block",
	`diskprobe-target.json: panel "Target" D`:                                      "a capped device",
	// The storage classes' row: the chart's probes of a StorageClass and its arrival prober.
	`diskprobe-fleet.json: variable storage_class`:                                                   "a StorageClass probe",
	`diskprobe-fleet.json: panel "fdatasync p99 of class $storage_class by node" A`:                  "a StorageClass probe",
	`diskprobe-fleet.json: panel "Time for a new volume to arrive, by class and stage (p50, p90)" A`: "the arrival prober",
	`diskprobe-fleet.json: panel "Time for a new volume to arrive, by class and stage (p50, p90)" B`: "the arrival prober",
	`diskprobe-fleet.json: panel "Volumes that failed to arrive, by class and stage" A`:              "the arrival prober",
	`diskprobe-fleet.json: panel "Volumes that failed to arrive, by class and stage" B`:              "the arrival prober",
	// An EBS volume's own statistics: none on a loop device.
	`diskprobe-target.json: panel "EBS volume: time over its limits, and its queue" A`: "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: time over its limits, and its queue" B`: "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: operations and bytes, everyone's" A`:    "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: operations and bytes, everyone's" B`:    "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: its own latency" A`:                     "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: its own latency" B`:                     "an EBS volume",
	`diskprobe-target.json: panel "EBS volume: its own latency" C`:                     "an EBS volume",
	// The row "etcd's view": a target with a vantage and an outside twin, which this exporter has not.
	`diskprobe-target.json: panel "fdatasync p99: inside etcd's cgroup, and outside" A`:   "a vantage target",
	`diskprobe-target.json: panel "Share of fdatasyncs over 10 ms: inside and outside" A`: "a vantage target",
	`diskprobe-target.json: panel "Share of fdatasyncs over 10 ms: inside and outside" B`: "a vantage target",
	`diskprobe-target.json: panel "Pressure in etcd's cgroup (PSI)" A`:                    "a vantage target",
	`diskprobe-target.json: panel "Pressure in etcd's cgroup (PSI)" B`:                    "a vantage target",
	`diskprobe-target.json: panel "Pressure in etcd's cgroup (PSI)" C`:                    "a vantage target",
	`diskprobe-target.json: panel "The vantage: joined, cgroup and class" A`:              "a vantage target",
	`diskprobe-target.json: panel "The vantage: joined, cgroup and class" B`:              "a vantage target",
}

// nodeExporterQueries are the queries that need node_exporter: required to return series
// when the test could scrape one.
var nodeExporterQueries = map[string]string{
	`diskprobe-target.json: panel "The workload on this device (node_exporter)" A`: "node_exporter",
	`diskprobe-target.json: panel "The workload on this device (node_exporter)" B`: "node_exporter",
}

// nodeExporterBinary is Debian's node_exporter (package prometheus-node-exporter).
const nodeExporterBinary = "prometheus-node-exporter"

// startNodeExporter runs node_exporter with only its diskstats collector, loop devices
// included (excluded by default), so that the workload panel joins the loop target's device.
// It reports false when node_exporter is not installed.
func startNodeExporter(t *testing.T) (string, bool) {
	t.Helper()
	bin, err := exec.LookPath(nodeExporterBinary)
	if err != nil {
		return "", false
	}
	addr := framework.FreePort(t)
	log := &testenv.SyncBuffer{}
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--collector.disable-defaults", "--collector.diskstats",
		"--collector.diskstats.device-exclude=^(ram|fd)[0-9]+$")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("node_exporter log:\n%s", log.String())
		}
	})
	testenv.WaitFor(t, 30*time.Second, "node_exporter answering on "+addr, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr, true
}

// cpuWaitUnmeasured tells a dashboard query of the CPU wait counter or its recording rule
// on a kernel without schedstat, where the exporter does not expose the counter.
func cpuWaitUnmeasured(expr, metrics string) bool {
	return strings.Contains(expr, "cpu_wait") && !strings.Contains(metrics, "diskprobe_probe_cpu_wait_seconds_total")
}

// rulesWithShortFor writes a copy of every rule file with every `for:` set to shortFor, and
// returns the copies' paths. The expressions are untouched: the test runs the real rules.
func rulesWithShortFor(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var out []string
	for _, path := range ruleFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		n := shortenFor(&doc)
		if n == 0 {
			t.Fatalf("%s: no `for:` to shorten", path)
		}
		short, err := yaml.Marshal(&doc)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(dst, short, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, dst)
	}
	return out
}

// shortenFor sets the value of every `for` key of the rules to shortFor and counts them.
func shortenFor(n *yaml.Node) int {
	count := 0
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "for" && n.Content[i+1].Kind == yaml.ScalarNode {
				n.Content[i+1].Value = shortFor
				count++
			}
			// A slower group's own interval (diskprobe.every5m, 5m) would leave its rules
			// unevaluated for the whole test: every group at the test's interval.
			if n.Content[i].Value == "interval" && n.Content[i+1].Kind == yaml.ScalarNode {
				n.Content[i+1].Value = shortFor
			}
		}
	}
	for _, c := range n.Content {
		count += shortenFor(c)
	}
	return count
}

// prometheus is a running Prometheus server.
// unhealthyRules lists the rules that failed their last evaluation or have not been
// evaluated yet.
func unhealthyRules(t *testing.T, p *framework.Prometheus) []string {
	t.Helper()
	var r struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.API("/api/v1/rules", nil, &r); err != nil {
		t.Fatal(err)
	}
	var bad []string
	n := 0
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" {
				bad = append(bad, fmt.Sprintf("%s/%s: %s %s", g.Name, rule.Name, rule.Health, rule.LastError))
			}
		}
	}
	if n != len(allRules(t)) {
		bad = append(bad, fmt.Sprintf("prometheus loaded %d rules, the files have %d", n, len(allRules(t))))
	}
	sort.Strings(bad)
	return bad
}

// alertState is the state (pending, firing, or "" when inactive) of an alert for a target:
// labelled with the target, or, for the disk alerts (one per disk), with the target's device.
func alertState(t *testing.T, p *framework.Prometheus, name, target string) string {
	t.Helper()
	device := ""
	if q, err := p.Query(fmt.Sprintf(`target:diskprobe_disk:device{job=%q, target=%q}`, e2eJob, target)); err == nil && len(q.Result) > 0 {
		device = q.Result[0].Metric["device"]
	}
	var r struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.API("/api/v1/alerts", nil, &r); err != nil {
		t.Fatal(err)
	}
	state := ""
	for _, a := range r.Alerts {
		ours := a.Labels["target"] == target || (a.Labels["target"] == "" && device != "" && a.Labels["device"] == device)
		if a.Labels["alertname"] == name && ours && a.Labels["job"] == e2eJob {
			if state != "firing" {
				state = a.State
			}
		}
	}
	return state
}

// scrapeText is the exporter's /metrics, for failure messages.
func scrapeText(addr string) string {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil || b.Len() > 200<<10 {
			break
		}
	}
	return b.String()
}

// pressureUnmeasured tells a dashboard query of the host's I/O pressure on a kernel without
// PSI (/proc/pressure/io), where the exporter does not expose it.
func pressureUnmeasured(expr, metrics string) bool {
	return strings.Contains(expr, "diskprobe_host_pressure_") && !strings.Contains(metrics, "diskprobe_host_pressure_io_waiting_seconds_total")
}
