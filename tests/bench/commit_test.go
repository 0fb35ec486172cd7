package bench

import (
	"github.com/diskprobe/diskprobe_exporter/internal/latency"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	bolt "go.etcd.io/bbolt"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// commitThreshold is etcd's target for backend_commit's p99.
const commitThreshold = 0.025

// measureEtcdCommit runs a single-member etcd (Debian's) on dir with the put load of
// measureEtcd while the exporter's commit probe (probeKey) runs from a probe_dir beside
// its data directory; Prometheus with native histograms scrapes both every second. The
// window starts once the probe's file is filled. Then, etcd stopped, `check
// --probes=commit` on the same filesystem. cg, when not nil, is the blkio cgroup every
// process doing I/O joins.
func measureEtcdCommit(t *testing.T, name, dir, dev string, cg *testenv.Cgroup, window time.Duration, probeKey string, checkCommits int) *benchkit.EtcdCommitDisk {
	d := &benchkit.EtcdCommitDisk{Name: name, Device: dev, Window: window, PutRate: etcdPutRate, Probe: "commit: " + probeKey}
	data, beside := filepath.Join(dir, "etcd"), filepath.Join(dir, "diskprobe-etcd")
	if err := os.Mkdir(beside, 0o700); err != nil {
		t.Fatal(err)
	}
	etcd := framework.StartEtcd(t, data, "--quota-backend-bytes=8589934592")
	join := func(pid int) {
		if cg != nil {
			cg.Add(pid)
		}
	}
	join(etcd.Pid())
	cfg := framework.WriteConfig(t, fmt.Sprintf("targets:\n  - name: etcd\n    path: %s\n    probe_dir: %s\n    commit: %s\n", data, beside, probeKey))
	exp := framework.StartExporter(t, cfg)
	join(exp.Pid())
	prom := framework.StartPrometheus(t, framework.PrometheusOptions{
		Jobs:  map[string]string{"etcd": strings.TrimPrefix(etcd.ClientURL, "http://"), "diskprobe": exp.Addr},
		Flags: []string{"--enable-feature=native-histograms"},
	})
	classic := framework.StartPrometheus(t, framework.PrometheusOptions{Jobs: map[string]string{"diskprobe": exp.Addr}})

	load := startPutLoad(etcd.ClientURL)
	framework.WaitMetric(t, exp, 10*time.Minute, "the commit probe's first round (its file filled)", func(f map[string]*dto.MetricFamily) bool {
		v, _ := framework.Value(f, "diskprobe_probe_runs_total", map[string]string{"probe": "commit"})
		return v > 0
	})
	before := load.Puts()
	time.Sleep(window + 5*time.Second)
	d.Puts = load.Stop() - before

	rng := fmt.Sprintf("[%ds]", int(window.Seconds()))
	q := func(p *framework.Prometheus, expr string) float64 {
		v, err := p.Value(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	etcdRate := `sum by (le) (rate(etcd_disk_backend_commit_duration_seconds_bucket` + rng + `))`
	ourRate := `sum(rate(diskprobe_commit_duration_seconds` + rng + `))`
	d.EtcdCommits = q(prom, `sum(increase(etcd_disk_backend_commit_duration_seconds_count`+rng+`))`)
	d.OurCommits = q(prom, `sum(histogram_count(increase(diskprobe_commit_duration_seconds`+rng+`)))`)
	for _, e := range benchkit.EtcdEdges {
		d.EtcdShares = append(d.EtcdShares, q(prom, fmt.Sprintf(`sum(rate(etcd_disk_backend_commit_duration_seconds_bucket{le="%g"}%s)) / sum(rate(etcd_disk_backend_commit_duration_seconds_count%s))`, e, rng, rng)))
		d.OurShares = append(d.OurShares, q(prom, fmt.Sprintf(`histogram_fraction(0, %g, %s)`, e, ourRate)))
	}
	d.EtcdP50 = q(prom, `histogram_quantile(0.5, `+etcdRate+`)`)
	d.EtcdP99 = q(prom, `histogram_quantile(0.99, `+etcdRate+`)`)
	d.OurP50 = q(prom, `histogram_quantile(0.5, `+ourRate+`)`)
	d.OurP99 = q(prom, `histogram_quantile(0.99, `+ourRate+`)`)
	classicRate := `sum by (le) (rate(diskprobe_commit_duration_seconds_bucket` + rng + `))`
	d.OurClassicP50 = q(classic, `histogram_quantile(0.5, `+classicRate+`)`)
	d.OurClassicP99 = q(classic, `histogram_quantile(0.99, `+classicRate+`)`)
	d.EtcdVerdictOK, d.OurVerdictOK = d.EtcdP99 < commitThreshold, d.OurP99 < commitThreshold
	t.Logf("%s: etcd %.0f commits p50 %s p99 %s; ours %.0f commits p50 %s p99 %s (classic %s, %s); %d puts",
		name, d.EtcdCommits, benchkit.Dur(d.EtcdP50*1e9), benchkit.Dur(d.EtcdP99*1e9), d.OurCommits, benchkit.Dur(d.OurP50*1e9), benchkit.Dur(d.OurP99*1e9),
		benchkit.Dur(d.OurClassicP50*1e9), benchkit.Dur(d.OurClassicP99*1e9), d.Puts)
	exp.Signal(15)
	<-exp.Done()
	etcd.Stop()

	commits := fmt.Sprint(checkCommits)
	d.CheckCommand = fmt.Sprintf("diskprobe_exporter check --probes=commit --commits=%s --probe-dir=%s %s", commits, beside, data)
	d.CheckTime, _, d.CheckVerdict = timedOnDevice(t, dev, cg, testenv.Binary(t), "check", "--probes=commit", "--commits="+commits, "--probe-dir="+beside, data)
	t.Logf("%s: check %s in %v", name, d.CheckVerdict, d.CheckTime)
	return d
}

// bboltDB is a database shaped like a cluster's: keys keys of valueSize random bytes,
// opened with etcd's options (bbolt's freelist not synced, the map freelist, a large
// initial mmap so that commits never remap).
func bboltDB(t *testing.T, dir string, keys, valueSize int) *bolt.DB {
	db, err := bolt.Open(filepath.Join(dir, "db"), 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType, InitialMmapSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	value := make([]byte, valueSize)
	for done := 0; done < keys; {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			b.FillPercent = 0.9
			for end := min(done+10000, keys); done < end; done++ {
				fill.Read(value)
				if err := b.Put(bboltKey(done), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// fill makes the values' random bytes.
var fill = rand.NewChaCha8([32]byte{1})

func bboltKey(i int) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(i))
	return k
}

// bboltCommits makes n transactions of keysPerTx updates of random existing keys and
// times each tx.Commit(), as etcd's backend_commit does; pages is the mean of the data
// pages each wrote.
func bboltCommits(t *testing.T, db *bolt.DB, n, keys, keysPerTx, valueSize int) (samples []time.Duration, pages float64) {
	value := make([]byte, valueSize)
	var writes int
	for range n {
		tx, err := db.Begin(true)
		if err != nil {
			t.Fatal(err)
		}
		b := tx.Bucket([]byte("key"))
		for range keysPerTx {
			fill.Read(value)
			if err := b.Put(bboltKey(rand.IntN(keys)), value); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		err = tx.Commit()
		samples = append(samples, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		st := tx.Stats()
		writes += int(st.GetWrite()) - 1 // the meta page is counted too
	}
	return samples, float64(writes) / float64(n)
}

// measureBbolt compares the probe with bbolt committing the same page counts in dir.
func measureBbolt(t *testing.T, dir string, rounds, perRound int) *benchkit.BboltCommits {
	work, err := os.MkdirTemp(dir, "bbolt-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	const keys, valueSize, keysPerTx = 80000, 1024, 4
	b := &benchkit.BboltCommits{Dir: dir, FS: fsOf(t, dir), Rounds: rounds, PerRound: perRound, Keys: keys, ValueSize: valueSize, KeysPerTx: keysPerTx}
	db := bboltDB(t, work, keys, valueSize)
	_, b.BboltPages = bboltCommits(t, db, 200, keys, keysPerTx, valueSize) // settles the freelist; sizes ours
	fi, err := os.Stat(filepath.Join(work, "db"))
	if err != nil {
		t.Fatal(err)
	}
	b.DBSize = fi.Size()
	b.OurPages = int(b.BboltPages + 0.5)
	p, err := probe.NewCommit(probe.CommitOptions{Dir: work, Ops: perRound, Pages: b.OurPages, FileSize: b.DBSize})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	var ours []time.Duration
	env := &probe.Env{Budget: probe.Unlimited, Observe: func(s probe.Sample) { ours = append(ours, s.Duration) }}
	prepared := false
	for !prepared {
		if _, err := p.Round(context.Background(), env); err == nil {
			prepared = true
		} else if !errors.Is(err, probe.ErrNotPrepared) {
			t.Fatal(err)
		}
	}
	pct := func(ds []time.Duration, q float64) time.Duration { return latency.Percentile(latency.Sorted(ds), q) }
	ourRound := func() {
		ours = ours[:0]
		if _, err := p.Round(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		b.OurP50, b.OurP99 = append(b.OurP50, pct(ours, 50)), append(b.OurP99, pct(ours, 99))
	}
	bboltRound := func() {
		s, _ := bboltCommits(t, db, perRound, keys, keysPerTx, valueSize)
		b.BboltP50, b.BboltP99 = append(b.BboltP50, pct(s, 50)), append(b.BboltP99, pct(s, 99))
	}
	for i := range rounds {
		if i%2 == 0 {
			bboltRound()
			ourRound()
		} else {
			ourRound()
			bboltRound()
		}
		t.Logf("round %d: bbolt p50 %v p99 %v | ours p50 %v p99 %v", i+1, b.BboltP50[i], b.BboltP99[i], b.OurP50[i], b.OurP99[i])
	}
	return b
}

func fsOf(t *testing.T, dir string) string {
	d, err := device.Paths{}.Resolve(dir)
	if err != nil {
		return "device unknown"
	}
	return "on " + d.Name
}

// measureCommitCost runs rounds of the default commit probe back to back on an idle loop
// ext4 and reads what its device was busy for.
func measureCommitCost(t *testing.T, rounds int) *benchkit.CommitCost {
	dev, mnt := testenv.LoopExt4(t, 1<<30)
	def := config.Default(config.ProbeCommit)
	p, err := probe.NewCommit(probe.CommitOptions{Dir: mnt, Ops: def.Ops, Pages: def.Pages, FileSize: def.FileSize})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	env := &probe.Env{Budget: probe.Unlimited}
	for {
		_, err := p.Round(context.Background(), env)
		if err == nil {
			break
		}
		if !errors.Is(err, probe.ErrNotPrepared) {
			t.Fatal(err)
		}
	}
	testenv.Run(t, "sync")
	time.Sleep(2 * time.Second) // the filling's writeback is over
	c := &benchkit.CommitCost{Device: filepath.Base(dev), Rounds: rounds, Interval: def.Interval}
	before := stats(t, dev)
	for range rounds {
		res, err := p.Round(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		c.OpsPerRound, c.BytesPerRound = int64(res.Ops), res.Bytes
	}
	after := stats(t, dev)
	c.Busy = after.IOTicks - before.IOTicks
	c.Writes, c.Flushes = after.WriteIOs-before.WriteIOs, after.FlushIOs-before.FlushIOs
	c.WrittenBytes = (after.WriteSectors - before.WriteSectors) * 512
	t.Logf("commit cost: %d rounds, %v busy, %d writes, %d flushes: %.3f %% at one round per %v", rounds, c.Busy, c.Writes, c.Flushes, c.Share()*100, c.Interval)
	return c
}

// measureCommit is the commit section of make bench: against etcd on this machine's disk
// (dir) and on a loop ext4 throttled to 20 write IOPS, against bbolt in dir, and the
// default probe's disk time.
func measureCommit(t *testing.T, dir string, window time.Duration) *benchkit.Commit {
	testenv.RequireTools(t, "etcd", "etcdctl", "prometheus")
	c := &benchkit.Commit{Date: time.Now()}
	hostDir, err := os.MkdirTemp(dir, "etcd-commit-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	hostDev, err := device.Paths{}.Resolve(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	// The default probe, but a round every second instead of every 15 s, so that its
	// histogram holds thousands of commits in the window.
	c.Disks = append(c.Disks, measureEtcdCommit(t, "this machine's disk ("+dir+")", hostDir, hostDev.Disk, nil, window, "{interval: 1s}", 200))
	dev, mnt := testenv.LoopExt4(t, 2<<30)
	cg := testenv.ThrottleWrites(t, dev, 20)
	// 2 commits a round on 20 IOPS: each is 13 operations. A 32 MiB file, check's, which
	// the throttled device fills in reasonable time.
	c.Disks = append(c.Disks, measureEtcdCommit(t, "loop ext4 throttled to 20 write IOPS", mnt, filepath.Base(dev), cg, window, "{interval: 1s, ops: 2, file_size: 32MiB}", 20))
	c.Bbolt = measureBbolt(t, dir, 9, 200)
	c.Cost = measureCommitCost(t, 40)
	return c
}

// TestCommitAgreement runs only the commit section of make bench (DISKPROBE_BENCH_ETCD=1;
// root) and logs its figures; with DISKPROBE_BENCH_REPORT it rewrites (or adds) that
// report's commit section.
func TestCommitAgreement(t *testing.T) {
	if os.Getenv("DISKPROBE_BENCH_ETCD") == "" {
		t.Skip("set DISKPROBE_BENCH_ETCD=1 to run the commit probe's comparison with a live etcd and bbolt alone")
	}
	testenv.RequireRoot(t)
	c := measureCommit(t, benchDir(t), 3*time.Minute)
	spliceReport(t, "commit", c.SpliceCommit)
}
