package alertreplay

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// The commit recordings: a live etcd's own etcd_disk_backend_commit_duration_seconds
// histogram (the whole bbolt commit, as etcd times it, the figure its FAQ wants under
// 25 ms at p99) under a steady put load, kept as percentile tables (testdata/etcd-commit-*.fio)
// for the commit alerts' replay.
const (
	// commitRecordPuts is the load, in puts a second: the order of a busy Kubernetes
	// control plane's writes, as the etcd agreement benchmark (tests/bench) runs it.
	commitRecordPuts = 100
	// commitRecordWindow holds ~10 commits a second (etcd's 100 ms batch interval) on a
	// healthy disk: 3000 commits, a p99 thirty deep.
	commitRecordWindow = 5 * time.Minute
)

type commitRecording struct {
	file, setup string
	dir         func(t *testing.T) (dir string, cg *testenv.Cgroup)
}

var commitRecordings = []commitRecording{
	{"etcd-commit-host.fio", "this machine's own disk, a directory under /var/tmp", func(t *testing.T) (string, *testenv.Cgroup) {
		dir, err := os.MkdirTemp("/var/tmp", "diskprobe-record-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir, nil
	}},
	{"etcd-commit-loop-20iops.fio", "ext4 on a loop device (image on this machine's disk), etcd's writes throttled to 20 IOPS by a blkio cgroup", func(t *testing.T) (string, *testenv.Cgroup) {
		dev, dir := testenv.LoopExt4(t, 1<<30)
		return dir, testenv.ThrottleWrites(t, dev, 20)
	}},
}

// TestRecordCommitDistributions rewrites testdata/etcd-commit-*.fio: Debian's etcd on this
// machine's disk and on a loop device throttled to 20 write IOPS, puts of 1 KiB at 100 a
// second for 5 minutes each, etcd's backend commit histogram read from its /metrics before
// and after. Root; about twelve minutes.
// DISKPROBE_RECORD=1 go -C tests test ./internal/alertreplay -run TestRecordCommitDistributions -v
func TestRecordCommitDistributions(t *testing.T) {
	if os.Getenv("DISKPROBE_RECORD") == "" {
		t.Skip("set DISKPROBE_RECORD=1 (root) to re-record testdata/etcd-commit-*.fio")
	}
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "etcd")
	for _, rec := range commitRecordings {
		t.Run(rec.file, func(t *testing.T) {
			dir, cg := rec.dir(t)
			etcd := framework.StartEtcd(t, filepath.Join(dir, "etcd"), "--quota-backend-bytes=8589934592")
			if cg != nil {
				cg.Add(etcd.Pid())
			}
			before := commitBuckets(t, etcd.ClientURL)
			puts := putSteadily(etcd.ClientURL, commitRecordWindow)
			after := commitBuckets(t, etcd.ClientURL)
			var delta []bucket
			for i, b := range after {
				delta = append(delta, bucket{b.le, b.count - before[i].count})
			}
			writeCommitRecording(t, filepath.Join("testdata", rec.file), rec.setup, puts, delta)
		})
	}
}

// bucket is one cumulative bucket of a histogram.
type bucket struct {
	le    float64
	count float64
}

var commitBucketLine = regexp.MustCompile(`^etcd_disk_backend_commit_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$`)

// commitBuckets reads etcd's backend commit histogram from its /metrics.
func commitBuckets(t *testing.T, url string) []bucket {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []bucket
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := commitBucketLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		le, _ := strconv.ParseFloat(m[1], 64)
		n, _ := strconv.ParseFloat(m[2], 64)
		out = append(out, bucket{le, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	if len(out) == 0 {
		t.Fatal("etcd's /metrics has no etcd_disk_backend_commit_duration_seconds_bucket")
	}
	return out
}

// putSteadily puts 1 KiB values at up to commitRecordPuts a second for d (a slow disk holds
// the client back, as it would a real cluster's), and says how many succeeded.
func putSteadily(url string, d time.Duration) int64 {
	var puts atomic.Int64
	var wg sync.WaitGroup
	stop := time.After(d)
	tick := time.NewTicker(time.Second / commitRecordPuts)
	defer tick.Stop()
	value := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 1024))
	sem := make(chan struct{}, 8)
	for i := 0; ; i++ {
		select {
		case <-stop:
			wg.Wait()
			return puts.Load()
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // 8 puts outstanding: the disk holds the client back
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			body, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("record/%d", i%1000))), "value": value})
			resp, err := http.Post(url+"/v3/kv/put", "application/json", bytes.NewReader(body))
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				puts.Add(1)
			}
		}(i)
	}
}

// writeCommitRecording writes the histogram as fio's percentile table: each bucket edge
// becomes the percentile of the commits at or under it.
func writeCommitRecording(t *testing.T, path, setup string, puts int64, bs []bucket) {
	total := bs[len(bs)-1].count
	if math.IsInf(bs[len(bs)-1].le, 1) {
		total = bs[len(bs)-1].count
		bs = bs[:len(bs)-1]
	}
	if total < 100 {
		t.Fatalf("%s: %v commits recorded, too few for a distribution", path, total)
	}
	var b strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	out, _ := execOutput("etcd", "--version")
	fmt.Fprintf(&b, "# etcd's backend commit latency (etcd_disk_backend_commit_duration_seconds: bbolt's whole commit, as etcd times it).\n")
	fmt.Fprintf(&b, "# setup: %s; Debian's etcd (%s), one member, --quota-backend-bytes=8GiB.\n", setup, firstLine(out))
	fmt.Fprintf(&b, "# load: 1 KiB puts over 1000 keys at up to %d/s for %s: %d puts, %.0f commits.\n", commitRecordPuts, commitRecordWindow, puts, total)
	fmt.Fprintf(&b, "# recorded: %s, kernel %s, %d CPUs, shared with other work.\n", time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(kernel)), runtime.NumCPU())
	fmt.Fprintf(&b, "# Each etcd bucket edge (le) becomes the percentile of the commits at or under it; cumulative counts:")
	for _, x := range bs {
		fmt.Fprintf(&b, " <=%gs %.0f", x.le, x.count)
	}
	fmt.Fprintf(&b, ", total %.0f.\n", total)
	fmt.Fprintf(&b, "# regenerate (root): DISKPROBE_RECORD=1 go -C tests test ./internal/alertreplay -run 'TestRecordCommitDistributions/%s' -v\n", filepath.Base(path))
	b.WriteString("  sync percentiles (usec):\n")
	var pairs []string
	last := -1.0
	for _, x := range bs {
		p := 100 * x.count / total
		if x.count == 0 || p <= last {
			continue // an empty bucket below the first commit, or one that adds none
		}
		last = p
		pairs = append(pairs, fmt.Sprintf("%sth=[%.0f]", strconv.FormatFloat(p, 'f', -1, 64), x.le*1e6))
		if x.count == total {
			break
		}
	}
	for i := 0; i < len(pairs); i += 4 {
		b.WriteString("   | " + strings.Join(pairs[i:min(i+4, len(pairs))], ", ") + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPercentileTable(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:\n%s", path, b.String())
}

func firstLine(s string) string { l, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); return l }

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
