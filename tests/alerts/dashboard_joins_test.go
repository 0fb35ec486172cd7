package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestTargetDashboardJoinsOtherExportersAndPeers runs the target dashboard's queries that
// the end-to-end test cannot fill (no smartctl_exporter there, every instance selected) and
// the node_exporter join on a Kubernetes-style instance (a node name without a port), on
// Prometheus's own engine over series named as the exporters name them: SMART joined by
// serial although smartctl_exporter says nvme0 where diskprobe says nvme0n1, the other
// members of a group when one is selected, and the workload's write latency on the node.
func TestTargetDashboardJoinsOtherExportersAndPeers(t *testing.T) {
	queries := map[string]string{}
	for _, q := range dashboardQueries(t) {
		queries[q.Where] = q.Expr
	}
	panel := func(title, ref string) string {
		t.Helper()
		expr, ok := queries[fmt.Sprintf("diskprobe-target.json: panel %q %s", title, ref)]
		if !ok {
			t.Fatalf("diskprobe-target.json: no query %s in panel %q", ref, title)
		}
		// One member selected, as on-call does from the fleet table.
		expr = strings.ReplaceAll(expr, `instance=~"$instance"`, `instance=~"m1"`)
		return expandGrafana(expr, "1m", ".*")
	}
	const smart = "SMART (smartctl_exporter)"
	const peers = "This member against its peers"
	const workload = "The workload on this device (node_exporter)"
	script := `
load 1m
  diskprobe_target_info{job="diskprobe", instance="m1", target="etcd", path="/var/lib/etcd", kind="directory", device="nvme0n1", model="M", serial="S1", rotational="0"} 1+0x10
  smartctl_device{job="smartctl", instance="m1:9633", device="nvme0", serial_number="S1", model_name="M"} 1+0x10
  smartctl_device_media_errors{job="smartctl", instance="m1:9633", device="nvme0"} 3+0x10
  smartctl_device_critical_warning{job="smartctl", instance="m1:9633", device="nvme0"} 0+0x10
  smartctl_device_available_spare{job="smartctl", instance="m1:9633", device="nvme0"} 100+0x10
  smartctl_device_available_spare_threshold{job="smartctl", instance="m1:9633", device="nvme0"} 10+0x10
  serial:smartctl_device_trouble:max{serial="S1"} 1+0x10
  instance:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m{job="diskprobe", cluster="", target="etcd", instance="m1"} 0.004+0x10
  instance:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m{job="diskprobe", cluster="", target="etcd", instance="m2"} 0.001+0x10
  instance:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m{job="diskprobe", cluster="", target="etcd", instance="m3"} 0.002+0x10
  peers:diskprobe_fdatasync_duration_seconds:mean_rate1m_min4m_median{job="diskprobe", cluster="", target="etcd"} 0.002+0x10

# node_exporter scraped every 15 s: 150 writes taking 0.75 s in all per scrape on m1 (5 ms
# each), 20 ms each on m2, whose disk is not this target's.
load 15s
  node_disk_write_time_seconds_total{job="node", instance="m1:9100", device="nvme0n1"} 0+0.75x40
  node_disk_writes_completed_total{job="node", instance="m1:9100", device="nvme0n1"} 0+150x40
  node_disk_write_time_seconds_total{job="node", instance="m2:9100", device="nvme0n1"} 0+3x40
  node_disk_writes_completed_total{job="node", instance="m2:9100", device="nvme0n1"} 0+150x40

eval instant at 5m ` + panel(smart, "A") + `
  {instance="m1", target="etcd"} 1

eval instant at 5m ` + panel(smart, "B") + `
  {instance="m1", target="etcd"} 3

eval instant at 5m ` + panel(smart, "C") + `
  {instance="m1", target="etcd"} 0

eval instant at 5m ` + panel(smart, "D") + `
  {instance="m1", target="etcd"} 100

eval instant at 5m ` + panel(smart, "E") + `
  {instance="m1", target="etcd"} 10

eval instant at 5m ` + panel(peers, "A") + `
  {instance="m1", target="etcd"} 0.004

eval instant at 5m ` + panel(peers, "B") + `
  {job="diskprobe", target="etcd"} 0.002

eval instant at 5m ` + panel(peers, "C") + `
  {instance="m2", target="etcd"} 0.001
  {instance="m3", target="etcd"} 0.002

eval instant at 5m ` + panel(workload, "A") + `
  {instance="m1", node="m1", target="etcd", device="nvme0n1"} 0.005
`
	promqltest.RunTest(t, script, promqltest.NewTestEngine(t, false, 5*time.Minute, 100000))
}
