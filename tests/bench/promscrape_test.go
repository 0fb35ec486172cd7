package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// Jobs of the Prometheus that scrapes both exporters.
const (
	jobOurs = "diskprobe"
	jobNode = "node"
)

// measurePrometheusScrape has a real Prometheus scrape the 64-target exporter and
// node_exporter every second, side by side, in each setting: Debian's 2.42 with default
// settings and with native histograms, Prometheus 3 with default settings, with native
// histograms beside the classic ones, and with classic histograms stored as native
// histograms with custom buckets. It reads back what Prometheus itself reports of each scrape:
// scrape_duration_seconds covers the request with Prometheus's own Accept and
// Accept-Encoding headers, gzip and reading the whole body.
func measurePrometheusScrape(t *testing.T, window time.Duration) []*benchkit.PromScrape {
	testenv.RequireTools(t, "prometheus", "prometheus-node-exporter")
	bin := testenv.Binary(t)
	nodeBin, err := exec.LookPath("prometheus-node-exporter")
	if err != nil {
		t.Fatal(err)
	}
	_, cfg := config64(t)
	ours := startDaemon(t, "/-/ready", bin, "--config.file="+cfg, "--log.level=warn")
	node := startDaemon(t, "/metrics", nodeBin)
	// Let the probe files be prepared and every series exist before Prometheus looks.
	time.Sleep(20 * time.Second)

	settings, v3 := promSettings(t)
	// Classic buckets stored as native histograms with custom buckets: one series per
	// histogram, but no _bucket series for the shipped rules.
	settings = append(settings, promSetting{server: v3, name: "convert_classic_histograms_to_nhcb (text format)",
		job: []string{"convert_classic_histograms_to_nhcb: true", "scrape_protocols: [PrometheusText0.0.4]"}})
	var out []*benchkit.PromScrape
	for _, setting := range settings {
		prom := framework.StartPrometheus(t, framework.PrometheusOptions{
			Binary:    setting.server.Bin,
			Jobs:      map[string]string{jobOurs: ours.addr, jobNode: node.addr},
			Flags:     setting.flags,
			JobConfig: setting.job,
		})
		time.Sleep(window + 5*time.Second)
		ps := &benchkit.PromScrape{Server: setting.server.Name, Setting: setting.name, Window: window}
		rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
		for _, side := range []struct {
			job string
			to  *benchkit.ScrapeSeen
		}{{jobOurs, &ps.Ours}, {jobNode, &ps.Node}} {
			q := func(expr string) float64 {
				v, err := prom.Value(fmt.Sprintf(expr, side.job))
				if err != nil {
					t.Fatalf("%s: %v", fmt.Sprintf(expr, side.job), err)
				}
				return v
			}
			side.to.Median = q(`quantile_over_time(0.5, scrape_duration_seconds{job=%q}` + rng + `)`)
			side.to.P90 = q(`quantile_over_time(0.9, scrape_duration_seconds{job=%q}` + rng + `)`)
			side.to.Samples = q(`max_over_time(scrape_samples_scraped{job=%q}` + rng + `)`)
			side.to.Scrapes = q(`count_over_time(scrape_duration_seconds{job=%q}` + rng + `)`)
			side.to.Up = q(`min_over_time(up{job=%q}` + rng + `)`)
		}
		// What the TSDB keeps per target: series with a target label, over the target count.
		perTarget, err := prom.Value(fmt.Sprintf(`count({job=%q, target!=""}) / count(count by (target) ({job=%q, target!=""}))`, jobOurs, jobOurs))
		if err != nil {
			t.Fatal(err)
		}
		ps.StoredSeriesPerTarget = perTarget
		t.Logf("prometheus %s scrape (%s): diskprobe median %.2fms p90 %.2fms %v samples, %.0f series stored per target; node_exporter median %.2fms p90 %.2fms %v samples",
			ps.Server, ps.Setting, ps.Ours.Median*1e3, ps.Ours.P90*1e3, ps.Ours.Samples, perTarget, ps.Node.Median*1e3, ps.Node.P90*1e3, ps.Node.Samples)
		out = append(out, ps)
	}
	return out
}

// promSetting is one way of running Prometheus against the exporter: which server, its
// flags, and lines added to each job's scrape config.
type promSetting struct {
	server framework.PrometheusServer
	name   string
	flags  []string
	job    []string
}

// promSettings are the settings every scrape comparison runs: Debian's 2.42 and
// Prometheus 3 (returned too, for a caller's own settings), each with default settings
// and with native histograms.
func promSettings(t *testing.T) (settings []promSetting, v3 framework.PrometheusServer) {
	t.Helper()
	servers := framework.PrometheusServers(t)
	debian, v3 := servers[0], servers[1]
	return []promSetting{
		{server: debian, name: "default settings"},
		{server: debian, name: "--enable-feature=native-histograms", flags: []string{"--enable-feature=native-histograms"}},
		{server: v3, name: "default settings"},
		// docs/metrics.md's advice for exact quantiles on Prometheus 3: native histograms, and the
		// classic series the shipped rules and dashboards read.
		{server: v3, name: "scrape_native_histograms + always_scrape_classic_histograms",
			job: []string{"scrape_native_histograms: true", "always_scrape_classic_histograms: true"}},
	}, v3
}

// TestPrometheusScrape runs only the Prometheus scrape comparison of make bench and logs
// its figures (DISKPROBE_BENCH_PROMSCRAPE=1; root, for the loop device).
func TestPrometheusScrape(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_PROMSCRAPE") == "" {
		t.Skip("set DISKPROBE_BENCH_PROMSCRAPE=1 to run the Prometheus scrape comparison alone")
	}
	testenv.RequireRoot(t)
	for _, ps := range measurePrometheusScrape(t, 80*time.Second) {
		if ps.Ours.Up != 1 || ps.Node.Up != 1 {
			t.Errorf("%s: a scrape failed (up min: ours %v, node %v)", ps.Setting, ps.Ours.Up, ps.Node.Up)
		}
	}
}
