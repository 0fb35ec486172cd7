package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The README's Prometheus snippet is the setup most users copy. The peer rules count only
// series with a non-empty `peer_group`, so the snippet must give its etcd hosts that label or the
// peer page can never fire. tests/docs checks that the label is written there; this test runs
// the shipped rules (promtool test rules, on each supported Prometheus) on series labelled
// exactly as that snippet makes Prometheus label them, one member failing, and expects the peer
// page; and, as the control, the same series without the snippet's `peer_group` (what the README's
// earlier snippet produced) never fire a peer alert.

// readmeScrape is the README's scrape configuration as Prometheus applies it.
type readmeScrape struct {
	Job          string
	Interval     time.Duration // the job's scrape_interval, else global, else Prometheus's 1m
	EvalInterval time.Duration // global evaluation_interval, else Prometheus's 1m
	Targets      []readmeTarget
}

// readmeTarget is one scraped address and the labels Prometheus gives its series.
type readmeTarget struct {
	Address string
	Labels  map[string]string // the static_config's labels
}

// yamlBlocks are the bodies of the ```yaml / ```yml code blocks of a Markdown document.
func yamlBlocks(doc string) []string {
	var out []string
	var cur []string
	in, keep := false, false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.HasPrefix(l, "```"):
			lang := strings.TrimSpace(strings.TrimPrefix(l, "```"))
			in, keep, cur = true, lang == "yaml" || lang == "yml", nil
		case in && strings.HasPrefix(l, "```"):
			in = false
			if keep {
				out = append(out, strings.Join(cur, "\n"))
			}
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// parseDuration reads a Prometheus duration ("15s", "1m", "1h30m"); def when empty.
func parseDuration(t *testing.T, s string, def time.Duration) time.Duration {
	t.Helper()
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("README.md: duration %q: %v", s, err)
	}
	return d
}

// readmeScrapeConfig is the one scrape job of README.md's Prometheus snippet and, from the
// exporter configuration the README gives, the name of its fsync target (the `target` label).
func readmeScrapeConfig(t *testing.T) (readmeScrape, string) {
	t.Helper()
	data, err := os.ReadFile(testenv.RepoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var snippets []readmeScrape
	var fsyncTargets []string
	for _, block := range yamlBlocks(string(data)) {
		if strings.Contains(block, "scrape_configs:") {
			var cfg struct {
				Global struct {
					ScrapeInterval     string `yaml:"scrape_interval"`
					EvaluationInterval string `yaml:"evaluation_interval"`
				} `yaml:"global"`
				ScrapeConfigs []struct {
					JobName        string `yaml:"job_name"`
					ScrapeInterval string `yaml:"scrape_interval"`
					StaticConfigs  []struct {
						Targets []string          `yaml:"targets"`
						Labels  map[string]string `yaml:"labels"`
					} `yaml:"static_configs"`
				} `yaml:"scrape_configs"`
			}
			if err := yaml.Unmarshal([]byte(block), &cfg); err != nil {
				t.Fatalf("README.md: the Prometheus snippet does not parse: %v\n%s", err, block)
			}
			for _, sc := range cfg.ScrapeConfigs {
				s := readmeScrape{
					Job:          sc.JobName,
					Interval:     parseDuration(t, sc.ScrapeInterval, parseDuration(t, cfg.Global.ScrapeInterval, time.Minute)),
					EvalInterval: parseDuration(t, cfg.Global.EvaluationInterval, time.Minute),
				}
				for _, st := range sc.StaticConfigs {
					for _, addr := range st.Targets {
						s.Targets = append(s.Targets, readmeTarget{Address: addr, Labels: st.Labels})
					}
				}
				snippets = append(snippets, s)
			}
			continue
		}
		// The exporter's configuration: a list of targets (or a document with `targets:`),
		// the one with an fsync probe names the series the peer rules read.
		var list []map[string]any
		if yaml.Unmarshal([]byte(block), &list) != nil {
			var doc struct {
				Targets []map[string]any `yaml:"targets"`
			}
			if yaml.Unmarshal([]byte(block), &doc) != nil {
				continue
			}
			list = doc.Targets
		}
		for _, tg := range list {
			if name, ok := tg["name"].(string); ok && name != "" {
				if _, ok := tg["fsync"]; ok {
					fsyncTargets = append(fsyncTargets, name)
				}
			}
		}
	}
	if len(snippets) != 1 {
		t.Fatalf("README.md: want one scrape job in its Prometheus snippet (a ```yaml block with scrape_configs:), found %d", len(snippets))
	}
	if len(fsyncTargets) == 0 {
		t.Fatal("README.md: no exporter target with an fsync probe in its ```yaml blocks: the series' `target` label is unknown")
	}
	s := snippets[0]
	if len(s.Targets) < 3 {
		t.Fatalf("README.md: the snippet's job %q scrapes %d exporters; a group of peers needs 3", s.Job, len(s.Targets))
	}
	return s, fsyncTargets[0]
}

// Classic fdatasync buckets (docs/metrics.md), and the share of one scrape's syncs at or under
// each: a healthy member's are 1-2.5 ms (mean 2 ms); the failing member's mean is 12 ms, half
// of them over etcd's 10 ms, all under 0.5 s.
var (
	fdatasyncLE    = []string{"0.0001", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.1", "0.5", "1", "+Inf"}
	healthyShareLE = []float64{0, 0, 1, 1, 1, 1, 1, 1, 1, 1}
	failingShareLE = []float64{0, 0, 0.45, 0.5, 0.5, 0.9, 1, 1, 1, 1}
)

const (
	healthyMean = 0.002
	failingMean = 0.012
	syncsPerSec = 20.0 / 15 // the fsync probe's default: 20 syncs every 15 s
)

// promSeries is one promtool input series.
type promSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// selector is metric{labels} with the labels sorted, as promtool reads it.
func selector(metric string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return metric + "{" + strings.Join(parts, ", ") + "}"
}

// scrapedSeries is what Prometheus stores from the snippet's job over samples+1 scrapes: each
// exporter's diskprobe series for the target, with job, instance (the target's address) and
// the static_config's labels, minus the labels named in drop. The last exporter's disk fails.
func scrapedSeries(s readmeScrape, target string, samples int, drop ...string) []promSeries {
	var out []promSeries
	counter := func(metric string, labels map[string]string, perScrape float64) {
		out = append(out, promSeries{selector(metric, labels), fmt.Sprintf("0+%sx%d", formatFloat(perScrape), samples)})
	}
	gauge := func(metric string, labels map[string]string, v float64) {
		out = append(out, promSeries{selector(metric, labels), fmt.Sprintf("%sx%d", formatFloat(v), samples)})
	}
	syncs := syncsPerSec * s.Interval.Seconds()
	for i, tg := range s.Targets {
		base := map[string]string{}
		for k, v := range tg.Labels {
			base[k] = v
		}
		for _, k := range drop {
			delete(base, k)
		}
		base["job"], base["instance"] = s.Job, tg.Address
		with := func(extra ...string) map[string]string {
			l := map[string]string{}
			for k, v := range base {
				l[k] = v
			}
			for j := 0; j+1 < len(extra); j += 2 {
				l[extra[j]] = extra[j+1]
			}
			return l
		}
		shares, mean := healthyShareLE, healthyMean
		if i == len(s.Targets)-1 {
			shares, mean = failingShareLE, failingMean
		}
		gauge("up", base, 1)
		for j, le := range fdatasyncLE {
			counter("diskprobe_fdatasync_duration_seconds_bucket", with("target", target, "le", le), shares[j]*syncs)
		}
		counter("diskprobe_fdatasync_duration_seconds_count", with("target", target), syncs)
		counter("diskprobe_fdatasync_duration_seconds_sum", with("target", target), mean*syncs)
		counter("diskprobe_write_duration_seconds_count", with("target", target), syncs)
		counter("diskprobe_write_duration_seconds_sum", with("target", target), 0.00002*syncs)
		// A little CPU wait (1 % of the probe's time): the host is not starved.
		counter("diskprobe_probe_cpu_wait_seconds_total", with("target", target, "probe", "fsync"), 0.01*mean*syncs)
		gauge("diskprobe_target_info", with("target", target, "path", "/var/lib/etcd", "kind", "directory",
			"device", "vda", "model", "Replay Disk", "serial", fmt.Sprintf("R%d", i+1), "rotational", "0"), 1)
	}
	return out
}

type alertCase struct {
	EvalTime  string       `yaml:"eval_time"`
	Alertname string       `yaml:"alertname"`
	ExpAlerts []alertMatch `yaml:"exp_alerts"`
}

type alertMatch struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

type ruleTest struct {
	Name        string       `yaml:"name"`
	Interval    string       `yaml:"interval"`
	InputSeries []promSeries `yaml:"input_series"`
	AlertTests  []alertCase  `yaml:"alert_rule_test"`
}

// peerAlerts are the alerts that read groups of peers: none may fire without the group's label.
var peerAlerts = []string{"DiskprobeFdatasyncSlowerThanPeers", "DiskprobePeersSlowTogether", "DiskprobePeerGroupTooSmall"}

// promDuration writes d as promtool reads it ("15m", "1h5m", "30s").
func promDuration(d time.Duration) string {
	out := ""
	if h := d / time.Hour; h > 0 {
		out += fmt.Sprintf("%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		out += fmt.Sprintf("%dm", m)
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 || out == "" {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}

// TestReadmePrometheusSnippetPagesForTheFailingPeer replays a failing etcd member's disk
// (fdatasync 6x its peers', half its syncs over 10 ms) under the README's scrape
// configuration. Expected: the peer page, DiskprobeFdatasyncSlowerThanPeers severity critical
// (for: 2m, reachable within minutes; the warning needs a full 2 h window), for that member,
// with the snippet's peer_group; no shared-cause or group-size alert. Without the snippet's
// `peer_group` label the same series fire no peer alert at all.
func TestReadmePrometheusSnippetPagesForTheFailingPeer(t *testing.T) {
	scrape, target := readmeScrapeConfig(t)
	const (
		duration = 20 * time.Minute
		pageAt   = 15 * time.Minute // promtool fires it from 4m (for: 2m); a margin for diskprobe.every5m
	)
	samples := int(duration / scrape.Interval)
	failing := scrape.Targets[len(scrape.Targets)-1]
	group := failing.Labels["peer_group"]
	t.Logf("README.md: job %q, scrape_interval %s, evaluation_interval %s, target %q, %d exporters; labels of the failing member %s: %v",
		scrape.Job, scrape.Interval, scrape.EvalInterval, target, len(scrape.Targets), failing.Address, failing.Labels)
	if group == "" {
		t.Errorf("README.md: the snippet gives %s no `peer_group` label: the peer rules (peer_group!=\"\") make no group of its exporters; the replay below shows the page missing", failing.Address)
	}

	groupPart := "" // as the annotation lists the group's non-empty labels
	if group != "" {
		groupPart = ", peer_group " + group
	}
	page := alertMatch{
		ExpLabels: map[string]string{
			"job":      scrape.Job,
			"instance": failing.Address,
			"target":   target,
			"severity": "critical",
		},
		ExpAnnotations: map[string]string{
			"summary": fmt.Sprintf("fdatasync on %s target %s is %.1fx slower than its peers and misses etcd's 10ms target; they do not.",
				failing.Address, target, failingMean/healthyMean),
			"description": fmt.Sprintf("%s is the slow member of its group (job %s%s, target %s): 50%% of its fdatasyncs took longer than 10ms in the last 5 minutes, against 0%% for the median member over the last hour. The others are healthy, so this disk is the suspect: for etcd, move the leader away from this member (etcdctl move-leader) and replace the member or its disk (runbook). Disk: vda, model \"Replay Disk\", serial \"R%d\".",
				failing.Address, scrape.Job, groupPart, target, len(scrape.Targets)),
			"runbook_url": runbookBase + "diskprobefdatasyncslowerthanpeers",
		},
	}
	if group != "" {
		page.ExpLabels["peer_group"] = group
	}
	snippet := ruleTest{
		Name:        "README snippet: one member's disk failing, the peer page names it",
		Interval:    promDuration(scrape.Interval),
		InputSeries: scrapedSeries(scrape, target, samples),
		AlertTests: []alertCase{
			{EvalTime: promDuration(pageAt), Alertname: "DiskprobeFdatasyncSlowerThanPeers", ExpAlerts: []alertMatch{page}},
			{EvalTime: promDuration(pageAt), Alertname: "DiskprobePeersSlowTogether"},
			{EvalTime: promDuration(pageAt), Alertname: "DiskprobePeerGroupTooSmall"},
		},
	}
	control := ruleTest{
		Name:        "control: the same series without the snippet's peer_group label fire no peer alert",
		Interval:    promDuration(scrape.Interval),
		InputSeries: scrapedSeries(scrape, target, samples, "peer_group"),
	}
	for _, at := range []time.Duration{pageAt, duration} {
		for _, name := range peerAlerts {
			control.AlertTests = append(control.AlertTests, alertCase{EvalTime: promDuration(at), Alertname: name})
		}
	}

	// Groups evaluated in the file's order, as in one Prometheus round (diskprobe.every5m,
	// last, reads what the others recorded).
	rulesPath := testenv.RepoPath("alerts", "diskprobe.rules.yml")
	var order []string
	for _, g := range loadRules(t, rulesPath).Groups {
		order = append(order, g.Name)
	}
	file := struct {
		RuleFiles          []string   `yaml:"rule_files"`
		EvaluationInterval string     `yaml:"evaluation_interval"`
		GroupEvalOrder     []string   `yaml:"group_eval_order"`
		Tests              []ruleTest `yaml:"tests"`
	}{[]string{rulesPath}, promDuration(scrape.EvalInterval), order, []ruleTest{snippet, control}}
	data, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "readme_snippet.test.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, srv := range framework.PrometheusServers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			out, err := exec.Command(srv.Promtool, "test", "rules", path).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s test rules (the README snippet's series):\n%s\n%v\nthe generated test file:\n%s", srv.Name, out, err, data)
			}
			t.Logf("%s", out)
		})
	}
}
