package sharding

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
)

// RulesEnv names the rule file to replay (default: the shipped alerts/diskprobe.rules.yml).
const RulesEnv = "DISKPROBE_SHARDING_RULES"

// OnlyEnv, when set, replays only the scenarios whose names start with it.
const OnlyEnv = "DISKPROBE_SHARDING_ONLY"

const evalEvery = time.Minute

func ruleFile(t *testing.T) string {
	if f := os.Getenv(RulesEnv); f != "" {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	return testenv.RepoPath("alerts", "diskprobe.rules.yml")
}

func scenarios(t *testing.T) []*alertreplay.Scenario {
	lib, err := alertreplay.LoadLibrary(testenv.RepoPath("tests", "internal", "alertreplay", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*alertreplay.Scenario
	for _, sc := range alertreplay.Scenarios(lib, alertreplay.Fast) {
		if p := os.Getenv(OnlyEnv); p == "" || strings.HasPrefix(sc.Name, p) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no scenario name starts with %q", os.Getenv(OnlyEnv))
	}
	return out
}

// TestVictoriaMetricsReplay replays the scenarios (OnlyEnv chooses) on VictoriaMetrics and
// vmalert and logs the comparison; it writes no report.
func TestVictoriaMetricsReplay(t *testing.T) {
	if os.Getenv(OnlyEnv) == "" {
		t.Skipf("set %s to the start of the scenario names to replay (make bench runs them all)", OnlyEnv)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	bin := framework.ToolDir(t, "victoriametrics")
	scs := scenarios(t)
	rules := ruleFile(t)
	ref, err := alertreplay.RunAll(context.Background(), scs, []string{rules}, alertreplay.DefaultProbing, evalEvery, alertreplay.Workers())
	if err != nil {
		t.Fatal(err)
	}
	run := runVictoriaMetrics(t, bin, newLayout(scs), alertreplay.DefaultProbing, rules, evalEvery)
	t.Logf("VictoriaMetrics: %d samples imported in %v, vmalert replay %v", run.Samples, run.Load.Round(time.Millisecond), run.Eval.Round(time.Second))
	for i := range scs {
		for _, r := range compare(ref[i], run.Results[i]) {
			t.Logf("%s | %s %s | prometheus %s | vm %s | %s", r.Scenario, r.Alert, r.Severity, r.Ref, r.Got, r.diff())
		}
	}
}

// splitGroup puts the scenario's disk (member-0, the one that turns bad) on shard 0 and its
// peers on shard 1: no shard holds a whole group.
func splitGroup(m alertreplay.Member) int {
	if strings.HasPrefix(m.Instance, "member-") && m.Instance != "member-0:10052" {
		return 1
	}
	return 0
}

// TestThanosReplay replays the scenarios (OnlyEnv chooses) with each group split across two
// Prometheus shards, the rules evaluated through a Thanos querier, and logs the comparison.
func TestThanosReplay(t *testing.T) {
	if os.Getenv(OnlyEnv) == "" {
		t.Skipf("set %s to the start of the scenario names to replay (make bench runs them all)", OnlyEnv)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	promBin, thanosBin := framework.ToolDir(t, "prometheus"), framework.ToolDir(t, "thanos")
	scs := scenarios(t)
	rules := ruleFile(t)
	ref, err := alertreplay.RunAll(context.Background(), scs, []string{rules}, alertreplay.DefaultProbing, evalEvery, alertreplay.Workers())
	if err != nil {
		t.Fatal(err)
	}
	run := runThanos(t, promBin, thanosBin, newLayout(scs), alertreplay.DefaultProbing, rules, evalEvery, splitGroup)
	t.Logf("Thanos: %d samples backfilled and served in %v, rules evaluated in %v", run.Samples, run.Load.Round(time.Millisecond), run.Eval.Round(time.Second))
	for i := range scs {
		for _, r := range compare(ref[i], run.Results[i]) {
			t.Logf("%s | %s %s | prometheus %s | thanos %s | %s", r.Scenario, r.Alert, r.Severity, r.Ref, r.Got, r.diff())
		}
	}
}

// TestShardingReport is `make bench`'s run: every scenario of the fast subset and a sharded
// fleet, on (1) two Prometheus shards by cluster, (2) two shards that split each group, each
// evaluating alone, (3) the same split behind Thanos Query with the rules evaluated through
// it, (4) VictoriaMetrics and vmalert; it rewrites its section of DISKPROBE_BENCH_REPORT.
// It fails when the Thanos run differs from one Prometheus: Thanos Query runs Prometheus's
// engine over the same samples, so any difference is a bug in the setup or the rules.
func TestShardingReport(t *testing.T) {
	out := os.Getenv("DISKPROBE_BENCH_REPORT")
	if out == "" {
		t.Skip("set DISKPROBE_BENCH_REPORT to the BENCHMARKS.md to rewrite")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	began := time.Now()
	promBin, thanosBin, vmBin := framework.ToolDir(t, "prometheus"), framework.ToolDir(t, "thanos"), framework.ToolDir(t, "victoriametrics")
	lib, err := alertreplay.LoadLibrary(testenv.RepoPath("tests", "internal", "alertreplay", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	scs := append(scenarios(t), fleetScenario(lib))
	rules := ruleFile(t)
	ctx := context.Background()
	probing := alertreplay.DefaultProbing
	ref, err := alertreplay.RunAll(ctx, scs, []string{rules}, probing, evalEvery, alertreplay.Workers())
	if err != nil {
		t.Fatal(err)
	}
	rep := &report{Command: "DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./sharding -run '^TestShardingReport$' -count=1 -v -timeout 60m",
		Date: time.Now(), RuleFile: strings.TrimPrefix(rules, testenv.RepoPath()+"/"), Scenarios: len(scs)}
	for _, b := range []string{filepath.Join(promBin, "prometheus"), filepath.Join(thanosBin, "thanos"), filepath.Join(vmBin, "victoria-metrics"), filepath.Join(vmBin, "vmalert")} {
		v, _ := exec.Command(b, "--version").CombinedOutput()
		line := "`" + filepath.Base(b) + "`: `" + strings.TrimSpace(strings.SplitN(string(v), "\n", 2)[0]) + "`"
		rep.Tools = append(rep.Tools, line)
	}

	// The scenarios with more than one member: the ones a shard boundary can cut.
	var groups []int
	for i, sc := range scs {
		if len(sc.Members()) > 1 {
			groups = append(groups, i)
		}
	}

	// (1) and (2): each shard evaluates the rules on its own members, in Prometheus's engine (what
	// a Prometheus shard runs); an Alertmanager receives from both.
	local := func(name, about string, shardOf func(alertreplay.Member) int) {
		l := &leg{Name: name, About: about}
		t0 := time.Now()
		parts := make([][2]*alertreplay.Result, len(groups))
		errs := make(chan error, 2*len(groups))
		sem := make(chan struct{}, alertreplay.Workers())
		var wg sync.WaitGroup
		for j, i := range groups {
			for k := range 2 {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					res, err := alertreplay.ReplayWith(ctx, scs[i], []string{rules}, probing, evalEvery, alertreplay.Options{
						Members: func(instance, cluster string) bool {
							return shardOf(alertreplay.Member{Instance: instance, Cluster: cluster}) == k
						}})
					parts[j][k] = res
					errs <- err
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for j, i := range groups {
			l.Rows = append(l.Rows, compare(ref[i], merge(scs[i], parts[j][:]))...)
		}
		l.Cost = fmt.Sprintf("(%v here.)", time.Since(t0).Round(time.Second))
		rep.Legs = append(rep.Legs, l)
	}
	local("two shards by peer group", "Two Prometheus shards, every group on one of them by `hashmod` of its `peer_group` label (the sharded fleet's c0 on one shard, c1-c3 on the other), each shard evaluating the rule file on its own members only; the group scenarios put their one group on one shard.", byCluster)
	local("two shards, groups split", "Two Prometheus shards that cut the groups: in the group scenarios the member that turns bad (member-0) on one shard, its peers on the other; in the fleets by hashmod of the instance, as sharding by address does (which happened to keep the sharded fleet's c1, the failing member's group, on one shard and to cut c2 and c3, all healthy); each shard evaluating the rule file on its own members only.", func(m alertreplay.Member) int {
		if strings.HasPrefix(m.Instance, "node-") {
			return hashmod(m.Instance, 2)
		}
		return splitGroup(m)
	})

	// (3) Thanos: the group scenarios split across two real Prometheus 3 servers. Not the
	// day-long Tail-at-Store fleets: through the querier a simulated day costs about 10 minutes.
	var gscs []*alertreplay.Scenario
	var tgroups []int
	for _, i := range groups {
		if scs[i].Span() <= 6*time.Hour {
			gscs = append(gscs, scs[i])
			tgroups = append(tgroups, i)
		}
	}
	th := runThanos(t, promBin, thanosBin, newLayout(gscs), probing, rules, evalEvery, func(m alertreplay.Member) int {
		if strings.HasPrefix(m.Instance, "node-") {
			return hashmod(m.Instance, 2)
		}
		return splitGroup(m)
	})
	l := &leg{Name: "Thanos Query + rule evaluation", About: "The same split, on two Prometheus 3 servers (the series backfilled with `promtool tsdb create-blocks-from openmetrics`), each behind a Thanos sidecar, and a Thanos querier over both and over a third Prometheus that takes what the rules record by remote write (Thanos Ruler's own TSDB and store API, in a deployment). The rule file is evaluated every minute of each scenario with Prometheus's rule manager, every expression sent to the querier's `/api/v1/query`: what Thanos Ruler does, on the replay's clock instead of the wall clock (Thanos Ruler has no replay mode)."}
	l.Cost = fmt.Sprintf("(%d samples backfilled and served in %v; %d scenarios evaluated in %v here.)", th.Samples, th.Load.Round(time.Second), len(gscs), th.Eval.Round(time.Second))
	for k, i := range tgroups {
		rows := compare(ref[i], th.Results[k])
		for _, r := range rows {
			if !r.Same {
				t.Errorf("thanos: %s | %s %s | prometheus %s | thanos %s", r.Scenario, r.Alert, r.Severity, r.Ref, r.Got)
			}
		}
		l.Rows = append(l.Rows, rows...)
	}
	rep.Legs = append(rep.Legs, l)

	// (4) VictoriaMetrics and vmalert, every scenario.
	vm := runVictoriaMetrics(t, vmBin, newLayout(scs), probing, rules, evalEvery)
	l = &leg{Name: "VictoriaMetrics + vmalert", About: "VictoriaMetrics single-node, every scenario's series imported with their timestamps (`/api/v1/import`), and `vmalert -replay.timeFrom/-replay.timeTo` evaluating the rule file over them (range queries, one rule after another, what each records written back by remote write before the next reads it); firings read back from the `ALERTS` series it wrote."}
	l.Cost = fmt.Sprintf("(%d samples imported in %v; vmalert's replay of %d scenarios took %v here, most of it the pause between rules.)", vm.Samples, vm.Load.Round(time.Second), len(scs), vm.Eval.Round(time.Second))
	for i := range scs {
		l.Rows = append(l.Rows, compare(ref[i], vm.Results[i])...)
	}
	rep.Legs = append(rep.Legs, l)

	rep.Elapsed = time.Since(began)
	for _, l := range rep.Legs {
		for _, r := range l.Rows {
			t.Logf("%s | %s | %s %s | prometheus %s | %s | %s", l.Name, r.Scenario, r.Alert, r.Severity, r.Ref, r.Got, r.diff())
		}
	}
	doc, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(rep.splice(string(doc))), 0o644); err != nil {
		t.Fatal(err)
	}
}
