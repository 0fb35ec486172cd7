package alertreplay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// Scenario is a disk's life: phases of latency, and where it turns bad.
type Scenario struct {
	Name   string
	Phases []Phase
	// Onset is the index of the phase in which the disk turns bad; -1: it never does, and
	// every firing is a false one.
	Onset int
	Model string // diskprobe_target_info's model label
	Seed  uint64
	// Peers are the other members of the disk's group (the same target on other instances of
	// the job, in one cluster), each with its phases over the same span; none for a lone disk.
	Peers [][]Phase
	// Fleet, when set, replays Groups groups of GroupSize members side by side (clusters c0,
	// c1, ...), member m of group g living Fleet(g, m); Phases then only gives the span.
	Fleet     func(g, m int) []Phase
	Groups    int
	GroupSize int
	// Ceilings: the exporter reports a device's ceiling (issue 42; diskprobe_device_at_ceiling
	// 0 outside the phases with a Ceiling), and Volume, when set, the target's volume block.
	Ceilings bool
	Volume   *Volume
}

// newMember is member m's simulated exporter and its series.
func (s *Scenario) newMember(m member, probing Probing) (*exporter, *series) {
	exp := newExporter(m.seed, probing, m.phases, start)
	ser := newSeries(s.Model, m, probing.edges())
	if s.Ceilings || s.Volume != nil {
		exp.ceilings, exp.volume = true, s.Volume
		ser.withCeilings(s.Volume)
	}
	return exp, ser
}

// members are the scenario's exporters: the disk (the first member) and its peers, or the fleet.
func (s *Scenario) members() []member {
	if s.Fleet != nil {
		var ms []member
		for g := range s.Groups {
			for m := range s.GroupSize {
				n := len(ms)
				ms = append(ms, member{instance: fmt.Sprintf("node-%d:10052", n), cluster: fmt.Sprintf("c%d", g),
					serial: fmt.Sprintf("REPLAY%d", n), phases: s.Fleet(g, m), seed: s.Seed<<20 + uint64(n)})
			}
		}
		return ms
	}
	if len(s.Peers) == 0 {
		return []member{{instance: instance, serial: "REPLAY", phases: s.Phases, seed: s.Seed}}
	}
	ms := []member{{instance: "member-0:10052", cluster: "etcd", serial: "REPLAY0", phases: s.Phases, seed: s.Seed}}
	for i, p := range s.Peers {
		ms = append(ms, member{instance: fmt.Sprintf("member-%d:10052", i+1), cluster: "etcd",
			serial: fmt.Sprintf("REPLAY%d", i+1), phases: p, seed: s.Seed<<20 + uint64(i+1)})
	}
	return ms
}

// Span is the scenario's length.
func (s *Scenario) Span() time.Duration {
	var d time.Duration
	for _, p := range s.Phases {
		d += p.Duration
	}
	return d
}

// onset is the time from the start to the onset (the whole span for a healthy scenario).
func (s *Scenario) onset() time.Duration {
	if s.Onset < 0 {
		return s.Span()
	}
	var d time.Duration
	for _, p := range s.Phases[:s.Onset] {
		d += p.Duration
	}
	return d
}

// Firing is what one alert (by name and severity) did in a scenario.
type Firing struct {
	Alert, Severity string
	// Detected is the time from the onset to the first evaluation at which the alert
	// fired at or after the onset; -1 when it did not fire after the onset.
	Detected time.Duration
	// False counts episodes (inactive → firing) that began before the onset: on a
	// healthy disk, every one.
	False int
	// Episodes counts every episode, before and after the onset, of every member.
	Episodes int
	Firing   time.Duration // total time spent firing (by any member)
	// Instances are the members it fired for.
	Instances []string
	// DetectedBy is, per member, the time from the onset to its first firing at or after it.
	DetectedBy map[string]time.Duration
	// Descriptions are the distinct description annotations it fired with at or after the
	// onset, in order (at most maxDescriptions): what the page said.
	Descriptions []string
}

// maxDescriptions bounds a Firing's Descriptions: the words, not every figure they quote.
const maxDescriptions = 8

// Result is one scenario's replay.
type Result struct {
	Scenario *Scenario
	Healthy  time.Duration // disk-time before the onset (summed over the members), over which False counts
	Firings  []*Firing     // sorted by alert, then severity
	Evals    int
	Samples  int
	Elapsed  time.Duration // wall-clock time of the replay
}

// Fired returns the firing of alert at severity, or nil.
func (r *Result) Fired(alert, severity string) *Firing {
	for _, f := range r.Firings {
		if f.Alert == alert && f.Severity == severity {
			return f
		}
	}
	return nil
}

// FalsePer30Days is false firings of f scaled to 30 days of healthy time.
func (r *Result) FalsePer30Days(f *Firing) float64 {
	if r.Healthy <= 0 {
		return 0
	}
	return float64(f.False) * (30 * 24 * time.Hour).Hours() / r.Healthy.Hours()
}

// start is the simulated clock's origin; any time would do.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Replay runs a scenario through the simulated exporter and scrape, and evaluates the rule
// files with Prometheus's own rule manager (as promtool's rule unit tests do) every
// evalEvery, in the order of the groups in the files; a group with an interval of its own
// (longer than evalEvery) only every that interval, as Prometheus does and promtool does not.
func Replay(ctx context.Context, sc *Scenario, ruleFiles []string, probing Probing, evalEvery time.Duration) (*Result, error) {
	return ReplayWith(ctx, sc, ruleFiles, probing, evalEvery, Options{})
}

// Options change where a replay's series live and where its rules are evaluated.
type Options struct {
	// Members, when set, keeps only the members it accepts (by instance and peer_group label):
	// what one shard of a sharded Prometheus holds.
	Members func(instance, cluster string) bool
	// Query, when set, evaluates every rule's expression elsewhere (a Thanos querier over
	// servers already holding the scenario's series, as Thanos Ruler does) instead of in the
	// replay's own engine and TSDB, and Appendable then takes what the rules record. Offset
	// moves the evaluation timestamps: the series live Offset later than the scenario's
	// start. Instance and peer_group labels then carry Prefix, removed from what is counted.
	Query      rules.QueryFunc
	Appendable storage.Appendable
	Offset     time.Duration
	Prefix     string
}

// Start is the simulated clock's origin: the time of a scenario's first scrape.
func Start() time.Time { return start }

// ReplayWith is Replay with opts.
func ReplayWith(ctx context.Context, sc *Scenario, ruleFiles []string, probing Probing, evalEvery time.Duration, opts Options) (*Result, error) {
	began := time.Now()
	span := sc.Span()
	dir, err := os.MkdirTemp(scratch(), "diskprobe-replay-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	tsdbOpts := tsdb.DefaultOptions()
	tsdbOpts.WALSegmentSize = -1 // nothing to recover: no write-ahead log
	// One head block for the whole span: no compaction while the replay runs.
	tsdbOpts.MinBlockDuration = (2*span + 24*time.Hour).Milliseconds()
	tsdbOpts.MaxBlockDuration = tsdbOpts.MinBlockDuration
	tsdbOpts.RetentionDuration = 0
	db, err := tsdb.Open(dir, promslog.NewNopLogger(), nil, tsdbOpts, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	db.DisableCompactions()

	engine := promql.NewEngine(promql.EngineOpts{
		Logger: promslog.NewNopLogger(), MaxSamples: 50_000_000, Timeout: time.Hour,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
	})
	query, appendable := rules.EngineQueryFunc(engine, db), storage.Appendable(db)
	if opts.Query != nil {
		query, appendable = opts.Query, opts.Appendable
	}
	mgr := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:  query,
		Appendable: appendable,
		Queryable:  db,
		Context:    ctx,
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {},
		Logger:     promslog.NewNopLogger(),
	})
	groups, err := loadInOrder(mgr, evalEvery, ruleFiles)
	if err != nil {
		return nil, err
	}

	var members []member
	for _, m := range sc.members() {
		if opts.Members == nil || opts.Members(m.instance, m.cluster) {
			members = append(members, m)
		}
	}
	tl := NewTally(sc, len(members), evalEvery)
	exps := make([]*exporter, len(members))
	sers := make([]*series, len(members))
	for i, m := range members {
		exps[i], sers[i] = sc.newMember(m, probing)
	}
	nextScrape := start
	due := make([]time.Time, len(groups)) // each group's next evaluation
	for i := range due {
		due[i] = start
	}
	var buf []float64
	var firing []Active
	for ts := start; !ts.After(start.Add(span)); ts = ts.Add(evalEvery) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if opts.Query == nil {
			app := db.Appender(ctx)
			for ; !nextScrape.After(ts); nextScrape = nextScrape.Add(probing.Scrape) {
				for i, exp := range exps {
					if buf, err = exp.scrape(app, sers[i], nextScrape, buf); err != nil {
						_ = app.Rollback()
						return nil, err
					}
					tl.res.Samples += len(buf)
				}
			}
			if err := app.Commit(); err != nil {
				return nil, err
			}
		}
		for i, g := range groups {
			// Each group at its own interval, as Prometheus runs it: a slower group's
			// recorded series are as old between its evaluations as they are there.
			if ts.Before(due[i]) {
				continue
			}
			for !due[i].After(ts) {
				due[i] = due[i].Add(g.Interval())
			}
			g.Eval(ctx, ts.Add(opts.Offset))
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					return nil, fmt.Errorf("%s at %s: rule %s: %w", sc.Name, ts.Sub(start), r.Name(), err)
				}
			}
		}
		firing = firing[:0]
		for _, g := range groups {
			for _, ar := range g.AlertingRules() {
				for _, a := range ar.ActiveAlerts() {
					if a.State == rules.StateFiring {
						firing = append(firing, Active{Alert: ar.Name(), Severity: a.Labels.Get("severity"),
							Instance:    strings.TrimPrefix(a.Labels.Get("instance"), opts.Prefix),
							Cluster:     strings.TrimPrefix(a.Labels.Get(GroupLabel), opts.Prefix),
							Description: a.Annotations.Get("description")})
					}
				}
			}
		}
		tl.Observe(ts, firing)
	}
	res := tl.Result()
	res.Elapsed = time.Since(began)
	return res, nil
}

// Active is one firing alert at one evaluation: its name, severity, and the member (instance)
// or group (cluster) it is about, and its description where the replay has it.
type Active struct{ Alert, Severity, Instance, Cluster, Description string }

// Tally turns the alerts firing at each evaluation into a Result: first firing after the
// onset, false firings, episodes. Replay counts its own; a replay elsewhere (vmalert's) feeds
// it what the other system recorded, evaluation by evaluation.
type Tally struct {
	sc        *Scenario
	evalEvery time.Duration
	onset     time.Time
	res       *Result
	firings   map[[2]string]*Firing
	firingNow map[[3]string]bool // alert, severity, member
}

// NewTally counts for sc replayed with members exporters, evaluated every evalEvery.
func NewTally(sc *Scenario, members int, evalEvery time.Duration) *Tally {
	return &Tally{sc: sc, evalEvery: evalEvery, onset: start.Add(sc.onset()),
		res:     &Result{Scenario: sc, Healthy: sc.onset() * time.Duration(members)},
		firings: map[[2]string]*Firing{}, firingNow: map[[3]string]bool{}}
}

// Observe counts the alerts firing at ts (on the scenario's clock), called once per
// evaluation in time order.
func (tl *Tally) Observe(ts time.Time, firing []Active) {
	tl.res.Evals++
	seen := map[[3]string]bool{}
	counted := map[[2]string]bool{}
	for _, a := range firing {
		k := [2]string{a.Alert, a.Severity}
		// A member is an instance; a group alert has none and stands for its cluster.
		mk := [3]string{k[0], k[1], a.Instance + "/" + a.Cluster}
		if seen[mk] {
			continue // the same alert on another op label
		}
		seen[mk] = true
		f := tl.firings[k]
		if f == nil {
			f = &Firing{Alert: k[0], Severity: k[1], Detected: -1, DetectedBy: map[string]time.Duration{}}
			tl.firings[k] = f
		}
		if !counted[k] {
			counted[k] = true
			f.Firing += tl.evalEvery
		}
		if a.Instance != "" && !slices.Contains(f.Instances, a.Instance) {
			f.Instances = append(f.Instances, a.Instance)
		}
		if !tl.firingNow[mk] {
			f.Episodes++
			if ts.Before(tl.onset) {
				f.False++
			}
		}
		if f.Detected < 0 && !ts.Before(tl.onset) && tl.sc.Onset >= 0 {
			f.Detected = ts.Sub(tl.onset)
		}
		if a.Description != "" && !ts.Before(tl.onset) && len(f.Descriptions) < maxDescriptions && !slices.Contains(f.Descriptions, a.Description) {
			f.Descriptions = append(f.Descriptions, a.Description)
		}
		if a.Instance != "" && !ts.Before(tl.onset) && tl.sc.Onset >= 0 {
			if _, ok := f.DetectedBy[a.Instance]; !ok {
				f.DetectedBy[a.Instance] = ts.Sub(tl.onset)
			}
		}
	}
	tl.firingNow = seen
}

// Result is what was counted, firings sorted by alert and severity.
func (tl *Tally) Result() *Result {
	res := tl.res
	res.Firings = nil
	for _, f := range tl.firings {
		slices.Sort(f.Instances)
		res.Firings = append(res.Firings, f)
	}
	slices.SortFunc(res.Firings, func(a, b *Firing) int {
		if a.Alert != b.Alert {
			return cmpString(a.Alert, b.Alert)
		}
		return cmpString(a.Severity, b.Severity)
	})
	return res
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// loadInOrder loads the rule files' groups in file order, group order within each file:
// later groups read what earlier ones record, as in a Prometheus evaluating them in turn.
func loadInOrder(mgr *rules.Manager, every time.Duration, files []string) ([]*rules.Group, error) {
	byKey, errs := mgr.LoadGroups(every, labels.EmptyLabels(), "", nil, false, files...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var ordered []*rules.Group
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation)
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		for _, rg := range rgs.Groups {
			g := byKey[rules.GroupKey(f, rg.Name)]
			if g == nil {
				return nil, fmt.Errorf("%s: group %s not loaded", f, rg.Name)
			}
			for _, r := range g.Rules() {
				if ar, ok := r.(*rules.AlertingRule); ok {
					ar.SetRestored(true) // no restart to restore `for` state from: write ALERTS from the start
				}
			}
			ordered = append(ordered, g)
		}
	}
	return ordered, nil
}

// scratch is where the replay's TSDB lives: memory when /dev/shm is there, so that a
// replay never competes with the disk it might be measuring.
func scratch() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// minutes prints a detection time for the report.
func minutes(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	m := d.Minutes()
	if m >= 120 {
		return fmt.Sprintf("%.1f h", m/60)
	}
	return fmt.Sprintf("%.0f min", math.Round(m))
}
