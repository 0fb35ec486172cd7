package alertreplay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// The commit alerts (the diskprobe.commit group) replayed as the fdatasync alerts are: the
// simulated exporter's one latency histogram carries the commit probe's commits, and the
// group's expressions read it under that name. The quality goals are the fdatasync alerts':
// a healthy disk stays quiet, one whose commits turn slow pages within 10 minutes, a slow
// failure warns within the hour, a 5-minute burst pages nothing.

// commitProbing is the commit probe's default (10 commits every 15 s, the runner's ±10 %
// jitter) under a 15 s scrape.
var commitProbing = Probing{Interval: 15 * time.Second, Ops: 10, Jitter: 0.1, Scrape: 15 * time.Second, Buckets: collector.CommitBuckets}

var commitMetric = regexp.MustCompile(`(^|[^:])diskprobe_commit_duration_seconds`)

// commitRuleFile writes the shipped rules' diskprobe.commit group, with the context group
// its alerts join for the disk's names, reading the simulated histogram: the commit
// metric's name and probe label become the fsync probe's, which the simulator writes.
func commitRuleFile(t *testing.T) string {
	data, err := os.ReadFile(testenv.RepoPath("alerts", "diskprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var keep []map[string]any
	for _, g := range file.Groups {
		switch g["name"] {
		case "diskprobe.context":
			keep = append(keep, g)
		case "diskprobe.commit":
			for _, r := range g["rules"].([]any) {
				rule := r.(map[string]any)
				expr := rule["expr"].(string)
				// The metric, not the recording rules named after it (level:metric:operations).
				expr = commitMetric.ReplaceAllString(expr, "${1}diskprobe_fdatasync_duration_seconds")
				expr = strings.ReplaceAll(expr, `probe="commit"`, `probe="fsync"`)
				rule["expr"] = expr
			}
			keep = append(keep, g)
		}
	}
	if len(keep) != 2 {
		t.Fatalf("alerts/diskprobe.rules.yml: want the diskprobe.context and diskprobe.commit groups, found %d of them", len(keep))
	}
	out, err := yaml.Marshal(map[string]any{"groups": keep})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "commit.rules.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// commitScenarios are the disks the commit alerts are judged on. A healthy disk is modelled:
// the synthetic SATA SSD of the fdatasync scenarios (a flush in about 2 ms) twice over, as a
// commit makes two fdatasyncs, with 0.5 % of commits stalled 30–80 ms (one of its syncs
// caught by a GC-like stall). This machine's own disk is not one: shared with other work, a
// live etcd recorded on it had 10 % of its commits over 25 ms (testdata/etcd-commit-host.fio),
// and is replayed as what it is. The failing disk is the live etcd recorded on a loop
// device throttled to 20 write IOPS; the slow failure and the burst are the fdatasync
// scenarios' at the commit's 25 ms scale.
func commitScenarios(lib Library) []*Scenario {
	ssd := Scaled{lib.get("synthetic-sata-ssd"), 2}
	healthy := WithStalls(ssd, 0.005, LogUniform{0.030, 0.080})
	lead, bad := 8*time.Hour, 2*time.Hour
	var out []*Scenario
	add := func(s *Scenario) { s.Seed = uint64(1000 + len(out)); out = append(out, s) }
	add(&Scenario{Name: "commit healthy: SATA SSD commits ~4 ms (two 2 ms flushes) + 0.5 % stalls at 30–80 ms", Onset: -1,
		Phases: []Phase{{Name: "healthy", Duration: 2 * day, Latency: healthy}}})
	add(&Scenario{Name: "commit recorded: a live etcd's commits on this machine's shared disk (10 % over 25 ms)", Onset: 0,
		Phases: []Phase{{Name: "as recorded", Duration: 8 * time.Hour, Latency: lib.get("etcd-commit-host")}}})
	add(&Scenario{Name: "commit sudden: a live etcd's commits on a loop device at 20 write IOPS (recorded)", Onset: 1,
		Phases: []Phase{{Name: "healthy", Duration: lead, Latency: healthy}, {Name: "throttled", Duration: bad, Latency: lib.get("etcd-commit-loop-20iops")}}})
	add(&Scenario{Name: "commit sudden: half the commits at 30–100 ms", Onset: 1,
		Phases: []Phase{{Name: "healthy", Duration: lead, Latency: healthy},
			{Name: "failing", Duration: bad, Latency: &Mixture{Name: "half slow", Parts: []Distribution{ssd, LogUniform{0.030, 0.100}}, Weights: []float64{0.5, 0.5}}}}})
	for _, share := range []float64{0.02, 0.05} {
		add(&Scenario{Name: fmt.Sprintf("commit slow failure: %.0f %% of commits at 50–75 ms", 100*share), Onset: 1,
			Phases: []Phase{{Name: "healthy", Duration: lead, Latency: healthy},
				{Name: "degraded", Duration: bad, Latency: WithStalls(ssd, share, LogUniform{0.050, 0.075})}}})
	}
	add(&Scenario{Name: "commit burst: 5 min of 100–300 ms commits (a backup)", Onset: 1,
		Phases: []Phase{{Name: "healthy", Duration: lead, Latency: healthy},
			{Name: "burst", Duration: 5 * time.Minute, Latency: LogUniform{0.100, 0.300}},
			{Name: "healthy again", Duration: bad, Latency: healthy}}})
	return out
}

// commitGoals are the fdatasync alerts' goals, judged on the commit alerts.
var commitGoals = []Goal{
	{
		Text:     "healthy disk (commits ~4 ms + 0.5 % stalls at 30–80 ms): no commit warning or critical",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "commit healthy") },
		Judge:    noWarningOrPage(isCommitAlert),
	},
	{
		Text:     "this machine's shared disk, a live etcd's commits 10 % over 25 ms: a commit warning (it misses etcd's target), no page",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "commit recorded") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "warning", commitAlerts(r)...)
			if c, cname := firstAt(r, "critical", commitAlerts(r)...); c >= 0 {
				return fmt.Sprintf("paged: %s after %s", cname, minutes(c)), false
			}
			if d < 0 {
				return "no warning", false
			}
			return fmt.Sprintf("%s (%s), no page", minutes(d), name), true
		},
	},
	{
		Text:     "most commits over 25 ms from one minute to the next: critical within 10 min, fired once",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "commit sudden") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical", commitAlerts(r)...)
			if d < 0 {
				return "no critical", false
			}
			m, ok := fmt.Sprintf("%s (%s)", minutes(d), name), d <= 10*time.Minute
			for _, f := range r.Firings {
				if isCommitAlert(f) && f.Episodes > 1 {
					m, ok = fmt.Sprintf("%s; %s %s ×%d", m, f.Alert, f.Severity, f.Episodes), false
				}
			}
			return m, ok
		},
	},
	{
		Text:     "slow failure, p50 unchanged, p99 at 2–3× 25 ms: a commit warning within 1 h",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "commit slow failure") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "warning", commitAlerts(r)...)
			if d < 0 {
				return "no warning", false
			}
			return fmt.Sprintf("%s (%s)", minutes(d), name), d <= time.Hour
		},
	},
	{
		Text:     "5-minute burst of ≥ 100 ms commits: no critical",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "commit burst") },
		Judge: func(r *Result) (string, bool) {
			var crit, warn []string
			for _, f := range r.Firings {
				switch {
				case isCommitAlert(f) && f.Severity == "critical":
					crit = append(crit, f.Alert)
				case isCommitAlert(f) && f.Severity == "warning":
					warn = append(warn, f.Alert)
				}
			}
			if len(crit) > 0 {
				return "critical: " + strings.Join(crit, ", "), false
			}
			if len(warn) > 0 {
				return "warning only: " + strings.Join(warn, ", "), true
			}
			return "nothing fired", true
		},
	},
}

func isCommitAlert(f *Firing) bool { return strings.HasPrefix(f.Alert, "DiskprobeCommit") }

func commitAlerts(r *Result) []string {
	var out []string
	for _, f := range r.Firings {
		if isCommitAlert(f) {
			out = append(out, f.Alert)
		}
	}
	return out
}

// TestCommitAlertsMeetTheFsyncGoals replays the commit scenarios (two days healthy, eight
// hours before each failure) and fails on any goal missed.
func TestCommitAlertsMeetTheFsyncGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("replays days of simulated time")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	lib, err := LoadLibrary("testdata")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	results, err := RunAll(context.Background(), commitScenarios(lib), []string{commitRuleFile(t)}, commitProbing, time.Minute, Workers())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commit scenarios in %v", len(results), time.Since(began).Round(time.Millisecond))
	for _, r := range results {
		for _, f := range r.Firings {
			t.Logf("%s: %s %s detected %s, %d episodes, %d false", r.Scenario.Name, f.Alert, f.Severity, minutes(f.Detected), f.Episodes, f.False)
		}
	}
	for _, g := range commitGoals {
		n := 0
		for _, r := range results {
			if !g.Scenario(r.Scenario.Name) {
				continue
			}
			n++
			if m, ok := g.Judge(r); !ok {
				t.Errorf("%s — %s: %s", g.Text, r.Scenario.Name, m)
			} else {
				t.Logf("met: %s — %s: %s", g.Text, r.Scenario.Name, m)
			}
		}
		if n == 0 {
			t.Errorf("no scenario for the goal %q", g.Text)
		}
	}
}
