package alertreplay

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Library is the latency distributions of a data directory, by file name without its
// extension: *.lat are recordings, *.fio percentile tables.
type Library map[string]Distribution

// LoadLibrary reads every *.lat and *.fio file of dir.
func LoadLibrary(dir string) (Library, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	lib := Library{}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var d Distribution
		switch filepath.Ext(e.Name()) {
		case ".lat":
			d, err = LoadEmpirical(path)
		case ".fio":
			d, err = LoadPercentileTable(path)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		lib[strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))] = d
	}
	return lib, nil
}

// get is a distribution the scenarios need.
func (l Library) get(name string) Distribution {
	d, ok := l[name]
	if !ok {
		panic(fmt.Sprintf("alertreplay: no distribution %q in the data directory", name))
	}
	return d
}

// Size is that of a scenario set: the full replay of `make bench`, or the fast subset of
// `make test`, which shortens the healthy stretches and keeps every goal.
type Size int

// The sizes: Fast for make test, Full for make bench.
const (
	Fast Size = iota
	Full
)

const day = 24 * time.Hour

// gcStalls are the GC-like stalls of a healthy disk (issue 15): 0.5 % of syncs at 20–60 ms.
var gcStalls = LogUniform{0.020, 0.060}

// failingSSD is issue 31's failing SSD: p50 about 12 ms (the geometric middle of 4–35 ms),
// p99 about 434 ms (two thirds up a 3 % tail at 0.1–0.9 s, log-uniform).
var failingSSD = &Mixture{Name: "failing SSD (p50 ~12 ms, p99 ~434 ms)",
	Parts: []Distribution{LogUniform{0.004, 0.035}, LogUniform{0.100, 0.900}}, Weights: []float64{0.97, 0.03}}

// hdd5400 is a 5400-rpm disk's fdatasync: a rotation is 11 ms, a sync one to three of them
// with the seek, 8–30 ms (log-uniform); about three quarters over 10 ms.
var hdd5400 = LogUniform{0.008, 0.030}

// Scenarios are the disks the alerts are judged on. Each scenario starts with enough
// healthy history for the rules' longest window (6 h) or, for the history-based rule, its
// baseline (a day, or a week in the full replay).
func Scenarios(lib Library, size Size) []*Scenario {
	sata := WithStalls(lib.get("synthetic-sata-ssd"), 0.005, gcStalls)
	healthyDays := day
	if size == Full {
		healthyDays = 30 * day
	}
	baseline := day + time.Hour // the 1 h window a day back full
	if size == Full {
		baseline = 7 * day
	}
	lead := 8 * time.Hour // the 6 h window full of healthy data
	// A sudden failure is paged by the 2m and 1h windows: 2 h of history is all they read.
	suddenLead := 2 * time.Hour
	// How long a bad phase is replayed: past every goal's deadline (2 h at most), and in the
	// full replay long enough for the slower alerts to show when they fire.
	bad := 2 * time.Hour
	if size == Full {
		suddenLead, bad = lead, 4*time.Hour
	}
	var out []*Scenario
	add := func(s *Scenario) { s.Seed = uint64(len(out) + 1); out = append(out, s) }

	// Healthy fleets: every firing is a false one.
	for _, h := range []struct{ name, file string }{
		{"healthy NVMe-like + 0.5 % GC stalls 20–60 ms", "synthetic-nvme"},
		{"healthy SATA SSD ~2 ms + 0.5 % GC stalls 20–60 ms", "synthetic-sata-ssd"},
		{"healthy RAID with cache + 0.5 % GC stalls 20–60 ms", "synthetic-raid-cache"},
	} {
		if size == Fast && h.file != "synthetic-sata-ssd" {
			continue // the SATA SSD has the least headroom under the 10 ms target
		}
		add(&Scenario{Name: h.name, Onset: -1, Phases: []Phase{
			{Name: "healthy", Duration: healthyDays, Latency: WithStalls(lib.get(h.file), 0.005, gcStalls)}}})
	}
	if size == Full {
		add(&Scenario{Name: "healthy SSD, published fio table (IBM 2019)", Onset: -1, Phases: []Phase{
			{Name: "healthy", Duration: 7 * day, Latency: lib.get("published-ssd-ibm2019")}}})
	}

	// Sudden failures: most syncs over 10 ms from one minute to the next.
	// The loop device was recorded under a blkio throttle: a cap the exporter recognises
	// (issue 42), so its pages must name the limit.
	for _, f := range []struct {
		name, file string
		ceiling    float64
	}{
		{"sudden: recorded loop device at 20 write IOPS", "loop-20iops", 20},
		{"sudden: published slow disk (etcd#10273, 83 % at 16–32 ms)", "published-hdd-etcd10273", 0},
	} {
		add(&Scenario{Name: f.name, Onset: 1, Ceilings: f.ceiling > 0, Phases: []Phase{
			{Name: "healthy", Duration: suddenLead, Latency: sata},
			{Name: "failing", Duration: bad, Latency: lib.get(f.file), Ceiling: f.ceiling}}})
	}
	add(&Scenario{Name: "sudden: 50 % of syncs at 12–40 ms", Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: suddenLead, Latency: sata},
		{Name: "failing", Duration: bad, Latency: &Mixture{Name: "half slow",
			Parts: []Distribution{lib.get("synthetic-sata-ssd"), LogUniform{0.012, 0.040}}, Weights: []float64{0.5, 0.5}}}}})

	// Slow failure: p50 unchanged, p99 at 2–3× the 10 ms target.
	for _, share := range []float64{0.02, 0.03, 0.05} {
		add(&Scenario{Name: fmt.Sprintf("slow failure: %.0f %% of syncs at 20–30 ms", 100*share), Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "degraded", Duration: bad, Latency: WithStalls(lib.get("synthetic-sata-ssd"), share, LogUniform{0.020, 0.030})}}})
	}
	if size == Full {
		add(&Scenario{Name: "slow failure: published degraded etcd member (etcd#12405)", Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "degraded", Duration: bad, Latency: lib.get("published-degraded-etcd12405")}}})
	}

	// A backup: five minutes of ≥ 100 ms syncs on a healthy disk.
	add(&Scenario{Name: "burst: 5 min of 100–300 ms syncs (a backup)", Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: lead, Latency: sata},
		{Name: "burst", Duration: 5 * time.Minute, Latency: LogUniform{0.100, 0.300}},
		{Name: "healthy again", Duration: bad, Latency: sata}}})

	// Degradation against the disk's own history.
	add(&Scenario{Name: fmt.Sprintf("%s healthy, then 3× slower", durationWords(baseline)), Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: baseline, Latency: sata},
		{Name: "3× slower", Duration: bad, Latency: Scaled{sata, 3}}}})

	// Recorded on this machine: what the rules make of real devices. The stalls, which took
	// the fast burn in and out of its window, are in the fast subset too.
	add(&Scenario{Name: "recorded: intermittent stalls of 0.2–2 s (loop device)", Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: lead, Latency: sata},
		{Name: "stalls", Duration: 4 * time.Hour, Latency: lib.get("loop-stalls")}}})
	if size == Full {
		add(&Scenario{Name: "recorded: loop device at 50 write IOPS", Onset: 1, Ceilings: true, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "throttled", Duration: 4 * time.Hour, Latency: lib.get("loop-50iops"), Ceiling: 50}}})
		add(&Scenario{Name: "recorded: loop device at 100 write IOPS", Onset: 1, Ceilings: true, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "throttled", Duration: 4 * time.Hour, Latency: lib.get("loop-100iops"), Ceiling: 100}}})
		// Load is others asking more than they did (issue 47): a day of history before the
		// competing writer's 80 IOPS, for DiskprobeFdatasyncSlowUnderLoad's baseline a day back.
		add(&Scenario{Name: "recorded: 100 IOPS shared with a competing writer (busy 90 %)", Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: day + time.Hour, Latency: sata, Busy: 0.05, OtherIOPS: 5},
			{Name: "loaded", Duration: 4 * time.Hour, Latency: lib.get("loop-100iops-competing"), Busy: 0.9, OtherIOPS: 80}}})
		add(&Scenario{Name: "recorded: this machine's disk (a shared VM disk)", Onset: 0, Phases: []Phase{
			{Name: "as recorded", Duration: day, Latency: lib.get("host")}}})
	}
	groupScenarios(lib, size, add)

	// Issue 31's, added last so that every earlier scenario keeps its seed: a failing SSD alone,
	// and a cluster whose members are all slow, for different reasons (each must be paged).
	add(&Scenario{Name: "sudden: a failing SSD (p50 ~12 ms, p99 ~434 ms)", Onset: 1, Ceilings: true, Phases: []Phase{
		{Name: "healthy", Duration: suddenLead, Latency: sata},
		{Name: "failing", Duration: bad, Latency: failingSSD}}})
	glead, gbad := 2*time.Hour, 3*time.Hour
	if size == Full {
		glead, gbad = 8*time.Hour, 4*time.Hour
	}
	hdd := []Phase{{Name: "healthy", Duration: glead, Latency: sata}, {Name: "5400-rpm disk", Duration: gbad, Latency: hdd5400}}
	add(&Scenario{Name: "group: a failing SSD and two 5400-rpm disks", Onset: 1,
		Phases: []Phase{{Name: "healthy", Duration: glead, Latency: sata}, {Name: "failing SSD", Duration: gbad, Latency: failingSSD}},
		Peers:  [][]Phase{hdd, hdd}})

	// Issue 47's, last for the seeds: a disk degrading under etcd's own steady writes, the
	// "others" on an etcd disk (100 IOPS). It serves the same I/Os more slowly, so it is busy
	// longer: the busy ratio climbs from 0.08 to 0.9 while others' IOPS do not move.
	add(&Scenario{Name: "steady load: a disk degrading under etcd's own 100 IOPS (busy 0.08 → 0.9)", Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: baseline, Latency: sata, Busy: 0.08, OtherIOPS: 100},
		{Name: "degrading", Duration: bad, Latency: WithStalls(lib.get("synthetic-sata-ssd"), 0.04, LogUniform{0.015, 0.030}),
			Busy: 0.9, OtherIOPS: 100}}})
	// And a healthy disk that freezes for 20 s every 2 minutes (the
	// first freeze a minute into the phase). It is about one slow sync in 140; each freeze costs
	// etcd its leader.
	add(&Scenario{Name: "freezes: 20 s every 2 minutes on a healthy SSD", Onset: 1, Phases: []Phase{
		{Name: "healthy", Duration: suddenLead, Latency: sata},
		{Name: "freezing", Duration: bad, Latency: sata, Freeze: &Freeze{Every: 2 * time.Minute, For: 20 * time.Second, After: time.Minute}}}})

	// Issue 42's, last for the seeds: volumes at their provider's ceiling. In the full replay
	// a week's baseline first, so that the history alert could blame the disk (it must not;
	// the promtool tests check it against a day); 2 h in the fast subset, for make test's time.
	capLead := suddenLead
	if size == Full {
		capLead = baseline
	}
	add(&Scenario{Name: fmt.Sprintf("capped: %s healthy, then held at 100 write IOPS (recorded loop device)", durationWords(capLead)), Onset: 1,
		Volume: &Volume{Type: "custom", Baseline: 100}, Phases: []Phase{
			{Name: "healthy", Duration: capLead, Latency: sata},
			{Name: "capped", Duration: bad, Latency: lib.get("loop-100iops"), Ceiling: 100}}})
	// A gp3 volume that sits at its 3,000 IOPS with syncs well under 10 ms: no news.
	add(&Scenario{Name: "capped but healthy: a gp3 volume held at its 3,000 IOPS, syncs under 10 ms", Onset: -1,
		Volume: &Volume{Type: "gp3", Baseline: 3000}, Phases: []Phase{
			{Name: "at its ceiling", Duration: suddenLead + bad, Latency: sata, Ceiling: 3000}}})
	// A 33 GiB gp2 volume (baseline 100 IOPS, bursts to 3,000 from a bucket of 5.4 million
	// I/Os): its load rises to 1,000 IOPS, which drains the bucket in 100 minutes (900 a
	// second over the refill), then the volume sits at its baseline and etcd's syncs queue.
	add(&Scenario{Name: "credits draining: a gp2 volume spends its burst bucket in 100 min, then sits at its 100 IOPS", Onset: 1,
		Volume: &Volume{Type: "gp2", Baseline: 100, Burst: 3000, Bucket: 5.4e6}, Phases: []Phase{
			{Name: "full bucket", Duration: time.Hour, Latency: sata, Drain: -50},
			{Name: "draining", Duration: creditsDrain, Latency: sata, Drain: 900},
			{Name: "at its baseline", Duration: time.Hour, Latency: lib.get("loop-100iops"), Ceiling: 100}}})
	// Issue 43's, after issue 42's, last for the seeds.
	equalLoadScenarios(lib, size, add)
	return out
}

// creditsDrain is how long the draining volume's bucket lasts (5.4 million I/Os at 900 a second).
const creditsDrain = 100 * time.Minute

// capWords are in every page's description for a capped volume (the rules' annotations).
const capWords = "provisioned limit"

// blameTheDisk are the alerts that suspect the hardware: quiet for a capped volume (issue 42).
var blameTheDisk = []string{"DiskprobeLatencySuspectHardware", "DiskprobeFailSlowVsPeers",
	"DiskprobeFdatasyncSlowerThanPeers", "DiskprobeSequentialThroughputDegraded"}

// cappedAndHurt are issue 42's scenarios of a volume at its ceiling while etcd misses 10 ms.
func cappedAndHurt(n string) bool {
	return strings.HasPrefix(n, "capped: ") || strings.HasPrefix(n, "credits draining:") ||
		strings.Contains(n, "loop device at 20 write IOPS") || strings.Contains(n, "loop device at 50 write IOPS") ||
		strings.Contains(n, "loop device at 100 write IOPS")
}

// pagesNamingTheCap judges a capped volume: a page, each alert once, every warning's and
// page's description naming the limit (the forecast aside), no alert that blames the disk.
func pagesNamingTheCap(r *Result) (string, bool) {
	var pages, unnamed []string
	ok := true
	for _, f := range r.Firings {
		if !shipped(f) || f.Detected < 0 || (f.Severity != "critical" && f.Severity != "warning") {
			continue
		}
		if f.Severity == "critical" {
			pages = append(pages, fmt.Sprintf("%s %s", f.Alert, minutes(f.Detected)))
			ok = ok && f.Episodes == 1
		}
		for _, d := range f.Descriptions {
			if f.Alert != "DiskprobeVolumeBurstCreditsLow" && !strings.Contains(d, capWords) {
				unnamed = append(unnamed, f.Alert)
				break
			}
		}
	}
	m := "pages: " + strings.Join(pages, ", ")
	if len(pages) == 0 {
		m, ok = "no page", false
	}
	if len(unnamed) > 0 {
		m, ok = m+"; not naming the limit: "+strings.Join(unnamed, ", "), false
	} else if len(pages) > 0 {
		m += "; each names the limit"
	}
	if hw := firedAny(r, blameTheDisk); len(hw) > 0 {
		return m + "; but " + strings.Join(hw, ", "), false
	}
	return m + "; no hardware alert", ok
}

// Groups whose members' latency rises with their load (issue 43): a member slower than its
// peers at the same load must warn; healthy members at different loads must not.
// Every member's others' IOPS swing ±40 % around its level in 10-minute steps, and each sync
// takes 1 + IOPS/500 times its sample: 1.4x at a follower's 200 IOPS, 1.6x at the leader's
// 300, 1.8x beside a neighbour's 400, so the plain ratio to the median member is 1.14x for the
// leader and 1.29x for the neighboured member, healthy both.
func equalLoadScenarios(lib Library, size Size, add func(*Scenario)) {
	sata := WithStalls(lib.get("synthetic-sata-ssd"), 0.005, gcStalls)
	const followerIOPS, swing, scale = 200, 0.4, 500
	at := func(name string, d time.Duration, lat Distribution, iops float64) Phase {
		return Phase{Name: name, Duration: d, Latency: lat, OtherIOPS: iops, LoadSwing: swing, LoadScale: scale}
	}
	// The fit's 3 h window and the warning's comparison 150-180 minutes back full of healthy data.
	lead := 3 * time.Hour
	healthySpan := 9 * time.Hour // a defragmentation after the first 3 h, and 6 h after it
	if size == Full {
		lead, healthySpan = 8*time.Hour, 2*day
	}
	follower := func(d time.Duration) []Phase { return []Phase{at("healthy", d, sata, followerIOPS)} }
	for _, s := range []struct {
		factor float64
		bad    time.Duration
	}{{1.3, 6 * time.Hour}, {1.5, 3 * time.Hour}} {
		bad := s.bad
		if size == Full {
			bad += time.Hour
		}
		add(&Scenario{Name: fmt.Sprintf("equal load: one member of 3 turns %.1f× slower than its peers at the same load", s.factor), Onset: 1,
			Phases: []Phase{at("healthy", lead, sata, followerIOPS), at(fmt.Sprintf("%.1f× slower", s.factor), bad, Scaled{sata, s.factor}, followerIOPS)},
			Peers:  [][]Phase{follower(lead + bad), follower(lead + bad)}})
	}
	healthy := func(name string, first []Phase) {
		add(&Scenario{Name: "equal load: healthy, " + name, Onset: -1, Phases: first,
			Peers: [][]Phase{follower(healthySpan), follower(healthySpan)}})
	}
	healthy("the leader doing 1.5× the writes", []Phase{at("leader", healthySpan, sata, 1.5*followerIOPS)})
	healthy("one member's neighbour at 2× the other IOPS", []Phase{at("neighboured", healthySpan, sata, 2*followerIOPS)})
	// A defragmentation rewrites the member's bolt database: 400 more IOPS for 20 minutes (2.2x
	// the latency), every 6 hours, the first 2 hours in. At 600 more (2.6x) the member's p99
	// crosses etcd's 10 ms and DiskprobeFdatasyncP99AboveEtcdTarget rightly warned once in 6
	// days; the peer warning stayed quiet either way.
	var defrag []Phase
	for t := time.Duration(0); t < healthySpan; {
		d := min(2*time.Hour, healthySpan-t)
		if t > 0 {
			d = min(6*time.Hour-20*time.Minute, healthySpan-t)
		}
		defrag = append(defrag, at("healthy", d, sata, followerIOPS))
		t += d
		if t < healthySpan {
			defrag = append(defrag, at("defragmenting", 20*time.Minute, sata, followerIOPS+400))
			t += 20 * time.Minute
		}
	}
	healthy("one member defragmenting for 20 min every 6 h", defrag)
}

// Groups of peers (issue 23): a 3-member group, one member turning bad, all of them, or a host
// starved of CPU; and a fleet of healthy groups for false pages per disk-day.
func groupScenarios(lib Library, size Size, add func(*Scenario)) {
	sata := WithStalls(lib.get("synthetic-sata-ssd"), 0.005, gcStalls)
	// The 1 h windows and the peer warning's 2 h window full of healthy data, and past every
	// deadline (3 h for a member 2× slower).
	lead, bad := 2*time.Hour, 3*time.Hour
	if size == Full {
		lead, bad = 8*time.Hour, 4*time.Hour
	}
	healthy := []Phase{{Name: "healthy", Duration: lead + bad, Latency: sata}}
	group := func(name string, turned Phase, peersToo bool) {
		turned.Duration = bad
		first := []Phase{{Name: "healthy", Duration: lead, Latency: sata}, turned}
		peers := [][]Phase{healthy, healthy}
		if peersToo {
			peers = [][]Phase{first, first}
		}
		add(&Scenario{Name: name, Onset: 1, Phases: first, Peers: peers})
	}
	group("group: one member of 3 turns 2× slower, all under 10 ms", Phase{Name: "2× slower", Latency: Scaled{sata, 2}}, false)
	group("group: one member of 3 turns 3× slower", Phase{Name: "3× slower", Latency: Scaled{sata, 3}}, false)
	group("group: one member of 3 turns into a failing SSD (half its syncs at 12–40 ms)", Phase{Name: "failing", Latency: &Mixture{Name: "half slow",
		Parts: []Distribution{lib.get("synthetic-sata-ssd"), LogUniform{0.012, 0.040}}, Weights: []float64{0.5, 0.5}}}, false)
	group("group: all 3 members turn 3× slower together, over 10 ms", Phase{Name: "3× slower", Latency: Scaled{sata, 3}}, true)
	// A host with its run queue at 5 per CPU: most wake-ups wait a few ms for a CPU, some a
	// scheduling period or more (the user's measurement: fdatasync p99 91–300 ms, disk idle).
	group("group: one member's node starved of CPU, its disk healthy", Phase{Name: "CPU-starved", Latency: sata,
		CPUWait: &Mixture{Name: "run-queue wait", Parts: []Distribution{LogUniform{0.0005, 0.010}, LogUniform{0.010, 0.300}},
			Weights: []float64{0.7, 0.3}}}, false)

	// Healthy groups, "The Tail at Store" (FAST'16): an SSD's hourly mean latency is more than 2×
	// its RAID group's median 0.6 % of the time, on top of the 0.5 % GC stalls. A slow hour is
	// slowed 2–4× (log-uniform; the paper's tail capped at 4×). Replaying 10,000 disk-days
	// through every rule costs about 13 s of CPU per disk-day here (35 CPU-hours), so the slow
	// hours are replayed densely instead: every member slow one hour in six, staggered (member m
	// at hours 2m mod 6) so that no two members of a group are slow in the same or adjacent hours,
	// as at 0.6 % they almost never are. The false pages they cause are then counted per slow hour
	// and reported per 10,000 disk-days at the paper's rate (1,440 slow hours); the healthy hours
	// between them are replayed too.
	groups, days, fleets := 1, 1, 3 // the fast subset: 36 slow hours, 250 disk-days' worth, in parallel
	if size == Full {
		groups, days, fleets = 10, 3, 4 // 4 × 10 × 3 members × 3 days × 4 = 1,440 slow hours
	}
	span := time.Duration(days) * day
	for f := range fleets {
		seed := uint64(1000 + f)
		add(&Scenario{
			Name:   fmt.Sprintf("fleet: %d healthy groups of 3, one slow hour in six each (Tail at Store) + GC stalls (part %d of %d)", groups, f+1, fleets),
			Onset:  -1,
			Phases: []Phase{{Name: "healthy", Duration: span}},
			Groups: groups, GroupSize: 3,
			Fleet: func(g, m int) []Phase {
				rng := rand.New(rand.NewPCG(seed, uint64(g*3+m)))
				var ph []Phase
				for h := range int(span / time.Hour) {
					if h%tailPeriod == 2*m {
						ph = append(ph, Phase{Name: "tail hour", Duration: time.Hour, Latency: Scaled{sata, LogUniform{2, 4}.Sample(rng)}})
						continue
					}
					if n := len(ph); n > 0 && ph[n-1].Name == "healthy" {
						ph[n-1].Duration += time.Hour
						continue
					}
					ph = append(ph, Phase{Name: "healthy", Duration: time.Hour, Latency: sata})
				}
				return ph
			},
		})
	}
}

// tailPeriod: in a replayed fleet every member is slow one hour in tailPeriod.
const tailPeriod = 6

// tailShare is "The Tail at Store"'s share of an SSD's hours more than 2× slower than its peers.
const tailShare = 0.006

// tailDiskDays is how many disk-days at the paper's rate hold as many slow hours as r replayed.
func tailDiskDays(r *Result) float64 {
	slowHours := r.Healthy.Hours() / tailPeriod
	return slowHours / (tailShare * 24)
}

// FleetFalse counts a healthy fleet's false pages (critical) and warnings, every one a false
// firing: the disks are healthy throughout.
func FleetFalse(r *Result) (pages, warnings int) {
	for _, f := range r.Firings {
		switch {
		case shipped(f) && f.Severity == "critical":
			pages += f.False
		case shipped(f) && f.Severity == "warning":
			warnings += f.False
		}
	}
	return pages, warnings
}

// WarningsPerDiskDay is the healthy fleets' false warnings (all, and the peer warning's) over their disk-days' worth at
// "The Tail at Store"'s rate (tailDiskDays: replayed slow hours / (0.6 % × 24 h)), all fleet
// scenarios of results together; ok is false when results hold no fleet scenario.
func WarningsPerDiskDay(results []*Result) (warnings, peer int, diskDays float64, ok bool) {
	for _, r := range results {
		if strings.HasPrefix(r.Scenario.Name, "fleet:") {
			_, w := FleetFalse(r)
			warnings += w
			if f := r.Fired("DiskprobeFdatasyncSlowerThanPeers", "warning"); f != nil {
				peer += f.False
			}
			diskDays += tailDiskDays(r)
			ok = true
		}
	}
	return warnings, peer, diskDays, ok
}

// shipped tells the shipped rules' alerts from the etcd mixin's yardstick riding along.
func shipped(f *Firing) bool { return strings.HasPrefix(f.Alert, "Diskprobe") }

// hardwareAlerts blame the disk: they must stay quiet for a shared cause or a starved host.
var hardwareAlerts = []string{"DiskprobeFdatasyncP99AboveEtcdTarget", "DiskprobeLatencySuspectHardware",
	"DiskprobeFailSlowVsPeers", "DiskprobeFdatasyncSlowerThanPeers"}

func durationWords(d time.Duration) string {
	if d%day == 0 {
		return fmt.Sprintf("%d days", d/day)
	}
	return fmt.Sprintf("%.0f h", d.Hours())
}

// Goal is one line of issue 15's table, judged on a scenario's result.
type Goal struct {
	Text     string
	Scenario func(name string) bool
	Judge    func(r *Result) (measured string, met bool)
}

// severities returns the first detection at each severity over all alerts.
func firstAt(r *Result, severity string, alerts ...string) (time.Duration, string) {
	best, name := time.Duration(-1), ""
	for _, f := range r.Firings {
		if !shipped(f) || f.Severity != severity || f.Detected < 0 || (len(alerts) > 0 && !slices.Contains(alerts, f.Alert)) {
			continue
		}
		if best < 0 || f.Detected < best {
			best, name = f.Detected, f.Alert
		}
	}
	return best, name
}

// peerDetection judges a peer alert: fired within limit after the onset, for member-0 only.
func peerDetection(r *Result, severity string, limit time.Duration) (string, bool) {
	f := r.Fired("DiskprobeFdatasyncSlowerThanPeers", severity)
	if f == nil || f.Detected < 0 {
		return "no peer " + severity, false
	}
	return fmt.Sprintf("%s, naming %s", minutes(f.Detected), strings.Join(f.Instances, ", ")),
		f.Detected <= limit && slices.Equal(f.Instances, []string{"member-0:10052"})
}

// firedAny lists the firings of the named alerts, any severity.
func firedAny(r *Result, alerts []string) []string {
	var out []string
	for _, f := range r.Firings {
		if slices.Contains(alerts, f.Alert) {
			out = append(out, fmt.Sprintf("%s %s ×%d", f.Alert, f.Severity, f.Episodes))
		}
	}
	return out
}

// Goals are issue 15's goals, then issue 23's (groups of peers).
var Goals = []Goal{
	{
		Text:     "≥ 50 % of fdatasyncs over 10 ms from one minute to the next: critical within 10 min",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "sudden:") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical")
			if d < 0 {
				return "no critical", false
			}
			return fmt.Sprintf("%s (%s)", minutes(d), name), d <= 10*time.Minute
		},
	},
	{
		Text: "slow failure, p50 unchanged, p99 at 2–3× 10 ms: a warning within 1 h",
		Scenario: func(n string) bool {
			return strings.HasPrefix(n, "slow failure:") && strings.HasSuffix(n, "of syncs at 20–30 ms")
		},
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "warning")
			if d < 0 {
				return "no warning", false
			}
			return fmt.Sprintf("%s (%s)", minutes(d), name), d <= time.Hour
		},
	},
	{
		Text: "a disk that stays slow: each fdatasync warning or critical fires once, not on and off",
		Scenario: func(n string) bool {
			return strings.HasPrefix(n, "sudden:") || strings.HasPrefix(n, "slow failure:") || strings.HasPrefix(n, "recorded:")
		},
		Judge: func(r *Result) (string, bool) {
			var flapping []string
			for _, f := range r.Firings {
				if strings.HasPrefix(f.Alert, "DiskprobeFdatasync") && (f.Severity == "warning" || f.Severity == "critical") && f.Episodes > 1 {
					flapping = append(flapping, fmt.Sprintf("%s %s ×%d", f.Alert, f.Severity, f.Episodes))
				}
			}
			if len(flapping) > 0 {
				return strings.Join(flapping, ", "), false
			}
			return "each once", true
		},
	},
	{
		Text:     "5-minute burst of ≥ 100 ms syncs: at most a warning, no critical",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "burst:") },
		Judge: func(r *Result) (string, bool) {
			var crit, warn []string
			for _, f := range r.Firings {
				if !shipped(f) {
					continue
				}
				switch f.Severity {
				case "critical":
					crit = append(crit, f.Alert)
				case "warning":
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
	{
		Text:     "healthy disk with 0.5 % GC stalls at 20–60 ms: no warning or critical",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "healthy") && strings.Contains(n, "GC stalls") },
		Judge:    noWarningOrPage(shipped),
	},
	{
		Text:     "healthy, then 3× slower at constant load: DiskprobeLatencySuspectHardware within 2 h",
		Scenario: func(n string) bool { return strings.HasSuffix(n, "then 3× slower") },
		Judge: func(r *Result) (string, bool) {
			f := r.Fired("DiskprobeLatencySuspectHardware", "warning")
			if f == nil || f.Detected < 0 {
				return "did not fire", false
			}
			return minutes(f.Detected), f.Detected <= 2*time.Hour
		},
	},
	// Issue 31 replaced issue 23's 15 and 10 minutes: peer warnings only for slowness that
	// persists past the hour a healthy disk's slow episode lasts.
	{
		Text:     "one member of 3 persistently 2× its peers, all under 10 ms: peer warning within 3 h, naming it",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "group: one member of 3 turns 2×") },
		Judge:    func(r *Result) (string, bool) { return peerDetection(r, "warning", 3*time.Hour) },
	},
	{
		Text:     "one member of 3 persistently 3× its peers: peer warning within 90 min, naming it",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "group: one member of 3 turns 3×") },
		Judge:    func(r *Result) (string, bool) { return peerDetection(r, "warning", 90*time.Minute) },
	},
	{
		Text:     "one member turns into a failing SSD: critical within 10 min, held (one episode), naming it the only one",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "group: one member of 3 turns into a failing SSD") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical")
			if d < 0 {
				return "no critical", false
			}
			m, ok := fmt.Sprintf("%s (%s)", minutes(d), name), d <= 10*time.Minute
			if f := r.Fired(name, "critical"); f.Episodes != 1 {
				m, ok = fmt.Sprintf("%s, %d episodes", m, f.Episodes), false
			}
			peer, peerOK := peerDetection(r, "critical", 10*time.Minute)
			m, ok = m+"; the peer page "+peer, ok && peerOK
			for _, c := range r.Firings {
				if shipped(c) && c.Severity == "critical" && !slices.Equal(c.Instances, []string{"member-0:10052"}) {
					m, ok = fmt.Sprintf("%s; %s names %s", m, c.Alert, strings.Join(c.Instances, ", ")), false
				}
			}
			return m, ok
		},
	},
	{
		Text:     "all 3 turn 3× slower together, over 10 ms: the group alert within 15 min, no hardware or peer alert",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "group: all 3") },
		Judge: func(r *Result) (string, bool) {
			f := r.Fired("DiskprobePeersSlowTogether", "warning")
			if f == nil || f.Detected < 0 {
				return "no group alert", false
			}
			if hw := firedAny(r, hardwareAlerts); len(hw) > 0 {
				return minutes(f.Detected) + "; but " + strings.Join(hw, ", "), false
			}
			return minutes(f.Detected) + ", no hardware or peer alert", f.Detected <= 15*time.Minute
		},
	},
	{
		Text:     "one node starved of CPU, its disk healthy: no disk-hardware alert, the host-starved alert fires",
		Scenario: func(n string) bool { return strings.Contains(n, "starved of CPU") },
		Judge: func(r *Result) (string, bool) {
			f := r.Fired("DiskprobeHostCPUStarved", "warning")
			if f == nil || f.Detected < 0 {
				return "no host-starved alert", false
			}
			m := "DiskprobeHostCPUStarved after " + minutes(f.Detected)
			var pages []string
			for _, c := range r.Firings {
				if shipped(c) && c.Severity == "critical" && c.Alert != f.Alert {
					pages = append(pages, c.Alert)
				}
			}
			if c := r.Fired("DiskprobeHostCPUStarved", "critical"); c != nil && c.Detected >= 0 {
				m += ", its page after " + minutes(c.Detected)
			}
			if len(pages) > 0 {
				m += "; other pages (etcd's thresholds, not hardware): " + strings.Join(pages, ", ")
			}
			if hw := firedAny(r, hardwareAlerts); len(hw) > 0 {
				return m + "; but " + strings.Join(hw, ", "), false
			}
			return m, true
		},
	},
	{
		Text:     "issue 47: a disk freezing 20 s every 2 minutes: critical within 10 min of the first freeze",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "freezes:") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical")
			if d < 0 {
				return "no critical", false
			}
			// The onset is a minute before the first freeze.
			return fmt.Sprintf("%s after the first freeze (%s)", minutes(d-time.Minute), name), d-time.Minute <= 10*time.Minute
		},
	},
	{
		Text:     "issue 31: a failing SSD (p50 about 12 ms, p99 about 434 ms): critical within 10 min",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "sudden: a failing SSD") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical")
			if d < 0 {
				return "no critical", false
			}
			return fmt.Sprintf("%s (%s)", minutes(d), name), d <= 10*time.Minute
		},
	},
	{
		Text:     "issue 31: a three-member cluster of one failing SSD and two 5400-rpm disks: each member paged within 10 min",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "group: a failing SSD and two 5400-rpm") },
		Judge: func(r *Result) (string, bool) {
			var parts []string
			ok := true
			for m := range 3 {
				inst := fmt.Sprintf("member-%d:10052", m)
				best, name := time.Duration(-1), ""
				for _, f := range r.Firings {
					if d, fired := f.DetectedBy[inst]; fired && shipped(f) && f.Severity == "critical" && (best < 0 || d < best) {
						best, name = d, f.Alert
					}
				}
				if best < 0 {
					parts, ok = append(parts, inst+" not paged"), false
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %s (%s)", inst, minutes(best), name))
				ok = ok && best <= 10*time.Minute
			}
			return strings.Join(parts, "; "), ok
		},
	},
	{
		Text:     "issue 31: one node starved of CPU, its disk healthy: host-starved only (no other warning or critical)",
		Scenario: func(n string) bool { return strings.Contains(n, "starved of CPU") },
		Judge: func(r *Result) (string, bool) {
			var others []string
			for _, f := range r.Firings {
				if shipped(f) && f.Alert != "DiskprobeHostCPUStarved" && (f.Severity == "warning" || f.Severity == "critical") {
					others = append(others, fmt.Sprintf("%s %s", f.Alert, f.Severity))
				}
			}
			if f := r.Fired("DiskprobeHostCPUStarved", "warning"); f == nil || f.Detected < 0 {
				return "no host-starved alert", false
			}
			if len(others) > 0 {
				return "also " + strings.Join(others, ", "), false
			}
			return "DiskprobeHostCPUStarved only", true
		},
	},
	{
		Text:     "issue 31: healthy groups, Tail-at-Store 2–4× slow hours (≤ 1 h) + GC stalls: 0 pages and at most 0.01 peer warnings per disk-day",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "fleet:") },
		Judge: func(r *Result) (string, bool) {
			pages, warnings := FleetFalse(r)
			peer := 0
			if f := r.Fired("DiskprobeFdatasyncSlowerThanPeers", "warning"); f != nil {
				peer = f.False
			}
			dd := tailDiskDays(r)
			return fmt.Sprintf("%d pages; %d peer warnings in %.0f disk-days' worth: %.3f per disk-day (all warnings: %d, %.3f per disk-day)",
					pages, peer, dd, float64(peer)/dd, warnings, float64(warnings)/dd),
				pages == 0 && float64(peer)/dd <= 0.01
		},
	},
	{
		Text:     "healthy groups, Tail-at-Store slow hours + GC stalls: at most 1 false page per 10,000 disk-days (over ≥ 10,000 disk-days' worth of slow hours in the full replay)",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "fleet:") },
		Judge: func(r *Result) (string, bool) {
			pages, warnings := 0, 0
			for _, f := range r.Firings {
				switch {
				case shipped(f) && f.Severity == "critical":
					pages += f.False
				case shipped(f) && f.Severity == "warning":
					warnings += f.False
				}
			}
			equiv := tailDiskDays(r)
			per := float64(pages) * 10000 / equiv
			// Short of 10,000 disk-days' worth, a single page is already over the rate: none may fire.
			return fmt.Sprintf("%d pages in %.0f slow hours and %.0f disk-days replayed, %.0f disk-days' worth at 0.6 %% (%.1f per 10,000); %d warnings",
				pages, r.Healthy.Hours()/tailPeriod, r.Healthy.Hours()/24, equiv, per, warnings), per <= 1 || pages == 0
		},
	},
	{
		Text:     "issue 47: a disk degrading under steady etcd-like load (others' IOPS steady, busy 0.08 → 0.9): called hardware (DiskprobeLatencySuspectHardware within 2 h), not load (no DiskprobeFdatasyncSlowUnderLoad)",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "steady load:") },
		Judge: func(r *Result) (string, bool) {
			m, ok := "no hardware alert", false
			if f := r.Fired("DiskprobeLatencySuspectHardware", "warning"); f != nil && f.Detected >= 0 {
				m, ok = "DiskprobeLatencySuspectHardware after "+minutes(f.Detected), f.Detected <= 2*time.Hour
			}
			if l := r.Fired("DiskprobeFdatasyncSlowUnderLoad", "info"); l != nil {
				return fmt.Sprintf("%s; but DiskprobeFdatasyncSlowUnderLoad ×%d", m, l.Episodes), false
			}
			return m + ", not called load", ok
		},
	},
	{
		Text:     "issue 42: a capped volume where etcd misses 10 ms: pages that name the limit (each once), no alert that blames the disk",
		Scenario: cappedAndHurt,
		Judge:    pagesNamingTheCap,
	},
	{
		Text:     "issue 42: capped but healthy (syncs under 10 ms at the ceiling): no warning or page",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "capped but healthy:") },
		Judge:    noWarningOrPage(shipped),
	},
	{
		Text:     "issue 42: burst credits draining: DiskprobeVolumeBurstCreditsLow at least 30 min before the bucket is empty",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "credits draining:") },
		Judge: func(r *Result) (string, bool) {
			f := r.Fired("DiskprobeVolumeBurstCreditsLow", "warning")
			if f == nil || f.Detected < 0 {
				return "no forecast", false
			}
			before := creditsDrain - f.Detected
			return fmt.Sprintf("%s into the drain, %s before empty (%d episode(s))", minutes(f.Detected), minutes(before), f.Episodes),
				before >= 30*time.Minute && f.Episodes == 1
		},
	},
	{
		Text:     "issue 42: a failing SSD (the exporter reports no ceiling): critical within 10 min, words of the hardware, not of a limit",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "sudden: a failing SSD") },
		Judge: func(r *Result) (string, bool) {
			d, name := firstAt(r, "critical")
			if d < 0 {
				return "no critical", false
			}
			for _, f := range r.Firings {
				for _, desc := range f.Descriptions {
					if strings.Contains(desc, capWords) {
						return fmt.Sprintf("%s (%s); but %s names a limit", minutes(d), name, f.Alert), false
					}
				}
			}
			return fmt.Sprintf("%s (%s), hardware words", minutes(d), name), d <= 10*time.Minute
		},
	},
	{
		Text:     "issue 43: one member of 3 persistently 1.3× its peers at equal load (latency rising with load): peer warning within 6 h, naming it",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "equal load: one member of 3 turns 1.3×") },
		Judge:    func(r *Result) (string, bool) { return peerDetection(r, "warning", 6*time.Hour) },
	},
	{
		Text:     "issue 43: one member of 3 persistently 1.5× its peers at equal load: peer warning within 3 h, naming it",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "equal load: one member of 3 turns 1.5×") },
		Judge:    func(r *Result) (string, bool) { return peerDetection(r, "warning", 3*time.Hour) },
	},
	{
		Text:     "issue 43: healthy members at different loads (a leader at 1.5× the writes, a neighbour at 2× the other IOPS, a 20-minute defragmentation every 6 h): no warning or critical",
		Scenario: func(n string) bool { return strings.HasPrefix(n, "equal load: healthy") },
		Judge:    noWarningOrPage(shipped),
	},
	{
		Text: "every failing scenario: lead time over the etcd mixin's etcdHighFsyncDurations (p99 > 0.5 s for 10m) on the same latencies",
		Scenario: func(n string) bool {
			return strings.HasPrefix(n, "sudden:") || strings.HasPrefix(n, "slow failure:") || strings.HasPrefix(n, "recorded:") ||
				strings.HasPrefix(n, "group:") || strings.HasSuffix(n, "then 3× slower")
		},
		Judge: func(r *Result) (string, bool) {
			ours, name := time.Duration(-1), ""
			for _, sev := range []string{"warning", "critical"} {
				if d, n := firstAt(r, sev); d >= 0 && (ours < 0 || d < ours) {
					ours, name = d, n
				}
			}
			etcd := r.Fired("etcdHighFsyncDurations", "warning")
			switch {
			case ours < 0:
				return "ours: nothing fired", true
			case etcd == nil || etcd.Detected < 0:
				return fmt.Sprintf("ours %s (%s); the etcd mixin never fires in the replayed %s", minutes(ours), name, durationWords(r.Scenario.Span()-r.Scenario.onset())), true
			}
			return fmt.Sprintf("ours %s (%s), the etcd mixin %s: %s earlier", minutes(ours), name, minutes(etcd.Detected), minutes(etcd.Detected-ours)), true
		},
	},
}

// noWarningOrPage judges a healthy scenario: none of the alerts counts selects fired a
// warning or a critical (each one that did is named, with its episodes).
func noWarningOrPage(counts func(*Firing) bool) func(*Result) (string, bool) {
	return func(r *Result) (string, bool) {
		var fired []string
		for _, f := range r.Firings {
			if counts(f) && (f.Severity == "warning" || f.Severity == "critical") {
				fired = append(fired, fmt.Sprintf("%s %s ×%d", f.Alert, f.Severity, f.Episodes))
			}
		}
		if len(fired) > 0 {
			return strings.Join(fired, ", ") + " in " + durationWords(r.Healthy), false
		}
		return "0 in " + durationWords(r.Healthy), true
	}
}
