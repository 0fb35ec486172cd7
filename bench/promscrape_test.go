package bench

import (
	"github.com/diskprobe/diskprobe_exporter/internal/benchkit"

	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// Jobs of the Prometheus that scrapes both exporters.
const (
	jobOurs = "diskprobe"
	jobNode = "node"
)

// measurePrometheusScrape has a real Prometheus (Debian's) scrape the 64-target exporter
// and node_exporter every second, side by side, once with default settings and once with
// native histograms enabled, and reads back what Prometheus itself reports of each scrape:
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

	var out []*benchkit.PromScrape
	for _, setting := range []struct {
		name  string
		flags []string
	}{
		{"default settings", nil},
		{"--enable-feature=native-histograms", []string{"--enable-feature=native-histograms"}},
	} {
		prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{
			Jobs:  map[string]string{jobOurs: ours.addr, jobNode: node.addr},
			Flags: setting.flags,
		})
		time.Sleep(window + 5*time.Second)
		ps := &benchkit.PromScrape{Setting: setting.name, Window: window}
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
		t.Logf("prometheus scrape (%s): diskprobe median %.2fms p90 %.2fms %v samples; node_exporter median %.2fms p90 %.2fms %v samples",
			ps.Setting, ps.Ours.Median*1e3, ps.Ours.P90*1e3, ps.Ours.Samples, ps.Node.Median*1e3, ps.Node.P90*1e3, ps.Node.Samples)
		out = append(out, ps)
	}
	return out
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
