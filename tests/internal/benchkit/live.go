package benchkit

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Markers around the live-alert section of BENCHMARKS.md (TestLivePeerGroupPagesTheFailingDisk).
const (
	LiveAlertBegin = "<!-- live alert section: make bench, or TestLivePeerGroupPagesTheFailingDisk alone, rewrites it -->"
	LiveAlertEnd   = "<!-- end of live alert section -->"
)

// LiveAlert is one live run of the shipped rules against three real exporters, one on a
// throttled disk.
type LiveAlert struct {
	Date            time.Time
	Prometheus      string
	Rules           string
	Window          time.Duration
	Interval        time.Duration // scrape and evaluation
	ThrottleIOPS    int
	Load, LoadAfter string
	Members         []string
	Throttled       string
	Devices         map[string]string // member → loop device
	P50, P99        [3]float64        // per member, seconds: fdatasync over the last 10 minutes (classic buckets)
	Alert           string            // the throttled member's first critical alert
	FiredAfter      time.Duration     // since the exporters started
	Names           bool              // it names the disk
	Labels          map[string]string
	Fired           map[string]time.Duration // "alertname instance severity" → first firing
	Others          []string                 // alerts that fired for the healthy members
}

// Markdown is the section, between its markers.
func (l *LiveAlert) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n## Live: three exporters, one failing disk\n<a id=\"live-alert\"></a>\n\n", LiveAlertBegin)
	w("Three real exporters (the daemon's binary, default probes, one target `etcd` each) on three loop-device ext4\n")
	w("filesystems (1 GiB sparse images), one peer group (`cluster: live` in the scrape config, instances\n")
	w("%s), scraped by %s with `%s`: scrape and rule evaluation every %s, every `for:` as shipped.\n",
		strings.Join(l.Members, ", "), l.Prometheus, l.Rules, l.Interval)
	w("%s's loop device is throttled by a blkio cgroup v1 (`blkio.throttle.write_iops_device` = %d) that its\n", l.Throttled, l.ThrottleIOPS)
	w("exporter joins; a failing SSD (tests/internal/alertreplay) has fdatasync p50 ≈ 12 ms, p99 ≈ 434 ms.\n")
	w("Watched for %s of real time from the first exporter's start. Load average %s at the start, %s at the end\n", l.Window, l.Load, l.LoadAfter)
	w("(2 CPUs shared with other work).\n\n")
	w("Command (alone, rewriting this section): `%s=1 DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestLivePeerGroupPagesTheFailingDisk$' -count=1 -v -timeout 30m` (root), run at %s.\n\n",
		"DISKPROBE_BENCH_LIVEALERT", l.Date.UTC().Format("2006-01-02 15:04 MST"))
	w("| member | device | fdatasync p50 | p99 |\n|---|---|---|---|\n")
	for i, m := range l.Members {
		note := ""
		if m == l.Throttled {
			note = " (throttled)"
		}
		w("| %s%s | %s | %s | %s |\n", m, note, l.Devices[m], Dur(l.P50[i]*1e9), Dur(l.P99[i]*1e9))
	}
	w("\nblkio's throttle lets I/O through in slices of time (100 ms), so a sync either passes at once or waits for the\n")
	w("next slice: the throttled shape is a heavy tail over a fast median, not the failing SSD's slow median. The\n")
	w("exporters start fresh, so the 1 h window of the error-budget burn alert holds only the minutes since the start;\n")
	w("on a disk that fails after an hour of health the same burn takes longer (tests/internal/alertreplay has the\n")
	w("replayed times).\n")
	w("\n| goal | measured | met |\n|---|---|---|\n")
	if l.Alert != "" {
		w("| the throttled member's critical page within 10 min | %s, %s after the exporters started (minute %d) | %s |\n",
			l.Alert, l.FiredAfter.Round(time.Second), int(l.FiredAfter/time.Minute)+1, metWord(l.FiredAfter <= 10*time.Minute))
		w("| the page names the disk | device %q in %s | %s |\n", l.Devices[l.Throttled], labelsOrAnnotations(l), metWord(l.Names))
	} else {
		w("| the throttled member's critical page within 10 min | none in %s | not met |\n", l.Window)
	}
	w("| nothing fires for the other two | %s | %s |\n", othersWord(l.Others), metWord(len(l.Others) == 0))
	w("\nEvery alert that fired, first seen (since the exporters started):\n\n")
	var ks []string
	for k := range l.Fired {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return l.Fired[ks[i]] < l.Fired[ks[j]] })
	if len(ks) == 0 {
		w("- none\n")
	}
	for _, k := range ks {
		w("- %s: `%s`\n", l.Fired[k].Round(time.Second), k)
	}
	w("%s\n", LiveAlertEnd)
	return b.String()
}

func labelsOrAnnotations(l *LiveAlert) string {
	if l.Labels["device"] != "" {
		return "its labels"
	}
	return "its annotations"
}

func othersWord(o []string) string {
	if len(o) == 0 {
		return "none"
	}
	return strings.Join(o, "; ")
}
