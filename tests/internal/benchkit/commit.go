package benchkit

import (
	"fmt"
	"strings"
	"time"
)

// Commit is the commit probe against etcd's own backend_commit and against bbolt, and
// what its default configuration costs a disk.
type Commit struct {
	Date  time.Time
	Disks []*EtcdCommitDisk
	Bbolt *BboltCommits
	Cost  *CommitCost
}

// EtcdCommitDisk is one disk of the comparison with a live etcd's backend commits.
type EtcdCommitDisk struct {
	Name, Device string
	Window       time.Duration
	Puts         int64
	PutRate      int
	Probe        string // the exporter's commit key

	EtcdCommits, OurCommits      float64
	EtcdShares, OurShares        []float64 // share ≤ each of EtcdEdges
	EtcdP50, EtcdP99             float64   // histogram_quantile from etcd's buckets
	OurP50, OurP99               float64   // from our native buckets
	OurClassicP50, OurClassicP99 float64   // from our classic buckets
	EtcdVerdictOK, OurVerdictOK  bool      // p99 under 25 ms
	CheckCommand, CheckVerdict   string    // diskprobe_exporter check --probes=commit
	CheckTime                    time.Duration
}

// BboltCommits is bbolt itself against the probe, in one process, on one filesystem.
type BboltCommits struct {
	Dir, FS            string
	Rounds, PerRound   int
	Keys, ValueSize    int
	KeysPerTx          int
	DBSize             int64
	BboltPages         float64 // data page writes per commit, mean (bbolt's TxStats.Write less the meta page)
	OurPages           int
	BboltP50, BboltP99 []time.Duration // per round
	OurP50, OurP99     []time.Duration
}

// CommitCost is what the default commit probe costs a disk: rounds of the default
// configuration back to back on an otherwise idle loop device, its io_ticks per round.
type CommitCost struct {
	Device                     string
	Rounds                     int
	Interval                   time.Duration
	Busy                       time.Duration // io_ticks over all rounds
	Writes, Flushes            uint64
	WrittenBytes               uint64
	OpsPerRound, BytesPerRound int64
}

// Share is the device's busy share at one round per interval.
func (c *CommitCost) Share() float64 {
	return float64(c.Busy) / float64(c.Rounds) / float64(c.Interval)
}

// commitVerdictWord is a commit p99 against etcd's 25 ms.
func commitVerdictWord(pass bool) string {
	if pass {
		return "p99 under 25 ms"
	}
	return "p99 at or over 25 ms"
}

func medianRatio(a, b []time.Duration) float64 {
	var rs []time.Duration
	for i := range a {
		if b[i] > 0 {
			rs = append(rs, time.Duration(float64(a[i])/float64(b[i])*1e6))
		}
	}
	return float64(MedianDur(rs)) / 1e6
}

// rows are the section's goals.
func (c *Commit) rows() []Row {
	var rows []Row
	for _, d := range c.Disks {
		ratio := d.OurP99 / d.EtcdP99
		rows = append(rows,
			Row{Figure: "commit p99 against a live etcd's backend_commit p99, " + d.Name,
				Value: fmt.Sprintf("%.2f× (%s vs etcd %s)", ratio, Dur(d.OurP99*1e9), Dur(d.EtcdP99*1e9)),
				Goal:  "within ±20 % or in the same etcd bucket", Met: within(ratio, 0.2) || sameEtcdBucket(d.OurP99, d.EtcdP99), Where: "commit"},
			Row{Figure: "25 ms verdict against a live etcd's, " + d.Name,
				Value: fmt.Sprintf("ours %s, etcd %s", commitVerdictWord(d.OurVerdictOK), commitVerdictWord(d.EtcdVerdictOK)),
				Goal:  "the same", Met: d.OurVerdictOK == d.EtcdVerdictOK, Where: "commit"},
			Row{Figure: "check's commit verdict against a live etcd's backend_commit, " + d.Name,
				Value: fmt.Sprintf("%s / etcd %s", firstWord(d.CheckVerdict), commitVerdictWord(d.EtcdVerdictOK)),
				Goal:  "the same verdict", Met: strings.HasPrefix(d.CheckVerdict, "PASS") == d.EtcdVerdictOK, Where: "commit"})
	}
	if b := c.Bbolt; b != nil {
		for _, q := range []struct {
			name  string
			o, bb []time.Duration
		}{{"p50", b.OurP50, b.BboltP50}, {"p99", b.OurP99, b.BboltP99}} {
			ratio := medianRatio(q.o, q.bb)
			rows = append(rows, Row{Figure: "commit " + q.name + " against bbolt's own commits of the same page count",
				Value: fmt.Sprintf("%.2f× (%s vs bbolt %s)", ratio, Dur(float64(MedianDur(q.o))), Dur(float64(MedianDur(q.bb)))),
				Goal:  "within ±20 %", Met: within(ratio, 0.2), Where: "commit"})
		}
	}
	if k := c.Cost; k != nil {
		rows = append(rows, Row{Figure: "device time of the default commit probe",
			Value: fmt.Sprintf("%.2f %% (%s busy per round, one round per %s)", k.Share()*100, (k.Busy / time.Duration(k.Rounds)).Round(100*time.Microsecond), k.Interval),
			Goal:  "under 1 %", Met: k.Share() < 0.01, Where: "commit"})
	}
	return rows
}

// Markers around the commit section, so that TestCommitAgreement alone can replace it.
const (
	commitBegin = "<!-- commit section: make bench, or TestCommitAgreement alone, rewrites it -->"
	commitEnd   = "<!-- end of commit section -->"
)

// SpliceCommit replaces the commit section of an existing BENCHMARKS.md with this one, or
// adds it after the etcd section where it has none yet.
func (c *Commit) SpliceCommit(doc string) (string, error) {
	var b strings.Builder
	c.markdown(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	if !strings.Contains(doc, commitBegin) {
		i := strings.Index(doc, etcdEnd)
		if i < 0 {
			return "", fmt.Errorf("no %q marker in the report to put the commit section after: run make bench once", etcdEnd)
		}
		i += len(etcdEnd)
		return doc[:i] + "\n" + strings.TrimSuffix(b.String(), "\n") + doc[i:], nil
	}
	return splice(doc, commitBegin, commitEnd, b.String())
}

func (c *Commit) markdown(w func(string, ...any)) {
	w("\n%s\n## The commit probe against etcd's backend and bbolt\n<a id=\"commit\"></a>\n\n", commitBegin)
	w("The `commit` probe does what bbolt's commit does under etcd (docs/design.md#the-commit-probe): page writes\n")
	w("at scattered offsets, `fdatasync`, a meta page, `fdatasync`, the whole commit one sample. Three measurements:\n")
	w("a live etcd's own `etcd_disk_backend_commit_duration_seconds` beside the exporter's\n")
	w("`diskprobe_commit_duration_seconds` on the same filesystem (the set-up of [Against a live etcd](#etcd):\n")
	w("Debian's etcd, one client putting 1 KiB values at up to 100 a second, both scraped every second by a\n")
	w("Prometheus with native histograms, p50/p99 by `histogram_quantile` over the window, on this machine's disk\n")
	w("and on a loop ext4 throttled to 20 write IOPS), then `check --probes=commit` on the same filesystem; bbolt\n")
	w("itself (`go.etcd.io/bbolt`, etcd's options) committing transactions that write the page count the probe\n")
	w("writes, against the probe, in alternating rounds; and the disk time of the default probe.\n\n")
	w("Command (alone, rewriting this section): `DISKPROBE_BENCH_ETCD=1 DISKPROBE_BENCH_REPORT=$PWD/BENCHMARKS.md go -C tests test ./bench -run '^TestCommitAgreement$' -count=1 -v -timeout 40m` (root), run at %s.\n\n", c.Date.UTC().Format("2006-01-02 15:04 MST"))
	w("| goal | measured | met |\n|---|---|---|\n")
	for _, row := range c.rows() {
		w("| %s: %s | %s | %s |\n", row.Figure, row.Goal, row.Value, metWord(row.Met))
	}
	for _, d := range c.Disks {
		w("\n### Against etcd: %s\n\n", d.Name)
		w("Exporter: `%s`. %s window, %d puts; commits counted: etcd %.0f, ours %.0f.\n\n", d.Probe, d.Window, d.Puts, d.EtcdCommits, d.OurCommits)
		w("| share of commits at or under | etcd backend_commit | our commit |\n|---|---|---|\n")
		for i, e := range EtcdEdges {
			w("| %s | %.2f %% | %.2f %% |\n", Dur(e*1e9), d.EtcdShares[i]*100, d.OurShares[i]*100)
		}
		w("\n| | etcd (its buckets) | ours (native buckets) | ours (classic buckets) |\n|---|---|---|---|\n")
		w("| p50 | %s | %s | %s |\n| p99 | %s | %s | %s |\n", Dur(d.EtcdP50*1e9), Dur(d.OurP50*1e9), Dur(d.OurClassicP50*1e9),
			Dur(d.EtcdP99*1e9), Dur(d.OurP99*1e9), Dur(d.OurClassicP99*1e9))
		w("| 25 ms verdict | %s | %s | |\n", commitVerdictWord(d.EtcdVerdictOK), commitVerdictWord(d.OurVerdictOK))
		w("\nThen, etcd stopped: `%s`: %s (%s).\n", d.CheckCommand, d.CheckVerdict, d.CheckTime.Round(100*time.Millisecond))
	}
	if b := c.Bbolt; b != nil {
		w("\n### Against bbolt\n\n")
		w("In `%s` (%s): a bbolt database (`NoFreelistSync`, map freelist, as etcd opens it) of %d keys of %d B values,\n", b.Dir, b.FS, b.Keys, b.ValueSize)
		w("%s, each transaction updating %d random keys: bbolt wrote %.1f data pages per commit on average\n", mib(b.DBSize), b.KeysPerTx, b.BboltPages)
		w("(`TxStats.Write` less its meta page), each commit timed around `tx.Commit()` as etcd times it. Ours:\n")
		w("`probe.NewCommit` with %d pages over a file of the database's size. %d rounds of %d commits of each,\n", b.OurPages, b.Rounds, b.PerRound)
		w("alternating which goes first; the figure is the median over rounds of ours/bbolt. bbolt's freelist hands\n")
		w("a transaction the pages the ones before it freed, a working set of a few MiB that it rewrites; the probe\n")
		w("draws every page afresh from the whole file ([docs/measurements.md](docs/measurements.md#commit-offsets)).\n\n")
		w("| | bbolt per round | ours per round |\n|---|---|---|\n")
		w("| p50 | %s | %s |\n| p99 | %s | %s |\n", durs(b.BboltP50), durs(b.OurP50), durs(b.BboltP99), durs(b.OurP99))
	}
	if k := c.Cost; k != nil {
		w("\n### Disk time of the default probe\n\n")
		w("The default `commit: {}` (10 commits of 10 pages a round, every 15 s), %d rounds back to back on an\n", k.Rounds)
		w("otherwise idle loop ext4 (`%s`), after its file was filled: %d writes, %d flushes, %s written in all,\n", k.Device, k.Writes, k.Flushes, mib(int64(k.WrittenBytes)))
		w("%s of io_ticks, %s per round: **%.2f %%** of the device's time at one round per %s. Its own load per round:\n", k.Busy.Round(time.Millisecond), (k.Busy / time.Duration(k.Rounds)).Round(100*time.Microsecond), k.Share()*100, k.Interval)
		w("%d operations (each write and each fdatasync), %s; on average %.1f operations/s and %.1f KiB/s, plus the\n", k.OpsPerRound, kib(int(k.BytesPerRound)), float64(k.OpsPerRound)/k.Interval.Seconds(), float64(k.BytesPerRound)/1024/k.Interval.Seconds())
		w("one-time filling of its 128 MiB file.\n")
	}
	w("%s\n", commitEnd)
}
