package alertreplay

import (
	"fmt"
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
	for _, f := range []struct{ name, file string }{
		{"sudden: recorded loop device at 20 write IOPS", "loop-20iops"},
		{"sudden: published slow disk (etcd#10273, 83 % at 16–32 ms)", "published-hdd-etcd10273"},
	} {
		add(&Scenario{Name: f.name, Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: suddenLead, Latency: sata},
			{Name: "failing", Duration: bad, Latency: lib.get(f.file)}}})
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
		add(&Scenario{Name: "recorded: loop device at 50 write IOPS", Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "throttled", Duration: 4 * time.Hour, Latency: lib.get("loop-50iops")}}})
		add(&Scenario{Name: "recorded: loop device at 100 write IOPS", Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "throttled", Duration: 4 * time.Hour, Latency: lib.get("loop-100iops")}}})
		add(&Scenario{Name: "recorded: 100 IOPS shared with a competing writer (busy 90 %)", Onset: 1, Phases: []Phase{
			{Name: "healthy", Duration: lead, Latency: sata},
			{Name: "loaded", Duration: 4 * time.Hour, Latency: lib.get("loop-100iops-competing"), Busy: 0.9}}})
		add(&Scenario{Name: "recorded: this machine's disk (a shared VM disk)", Onset: 0, Phases: []Phase{
			{Name: "as recorded", Duration: day, Latency: lib.get("host")}}})
	}
	return out
}

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
		if f.Severity != severity || f.Detected < 0 || (len(alerts) > 0 && !slices.Contains(alerts, f.Alert)) {
			continue
		}
		if best < 0 || f.Detected < best {
			best, name = f.Detected, f.Alert
		}
	}
	return best, name
}

// Goals are issue 15's goals.
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
		Judge: func(r *Result) (string, bool) {
			var fired []string
			for _, f := range r.Firings {
				if f.Severity == "warning" || f.Severity == "critical" {
					fired = append(fired, fmt.Sprintf("%s %s ×%d", f.Alert, f.Severity, f.Episodes))
				}
			}
			if len(fired) > 0 {
				return strings.Join(fired, ", ") + " in " + durationWords(r.Healthy), false
			}
			return "0 in " + durationWords(r.Healthy), true
		},
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
}
