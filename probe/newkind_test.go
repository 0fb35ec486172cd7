package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// newKindFile is a whole new probe kind, as docs/development.md's recipe writes one: its
// I/O, its declaration and its registration in one file of this package. Each operation
// rewrites one block_size block after the header of its own file and fdatasyncs it, the
// pair timed as one sample of a phase of its own, recorded into a histogram with bucket
// edges of its own.
const newKindFile = `package probe

import (
	"context"
	"time"
)

func init() {
	register(&Kind{
		Name: "pagesync", Order: 60, Writes: true,
		Keys:         []string{"interval", "ops", "block_size"},
		Defaults:     Settings{Interval: time.Second, Ops: 3, BlockSize: 4096},
		LargestBlock: blockSize,
		Histograms: []Histogram{{Phase: PhasePagesync, Name: "pagesync_duration_seconds",
			Help: "Time of each block write and its fdatasync of the pagesync probe.", Buckets: []float64{0.001, 0.01, 0.25}}},
		New: func(site Site, s Settings) (Prober, error) {
			file, err := openOwnFile(site.Dir, "pagesync.probe")
			if err != nil {
				return nil, err
			}
			return &prober[*pagesyncer]{kind: &pagesyncer{file: file, ops: s.Ops, buf: make([]byte, s.BlockSize)}}, nil
		},
	})
}

// PhasePagesync is the pagesync probe's sample: a write and its fdatasync.
const PhasePagesync Phase = 8

type pagesyncer struct {
	file  ownFile
	ops   int
	buf   []byte
	calls [2]ioCall
}

func (k *pagesyncer) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if err := r.untimed(k.file.check); err != nil {
		return res, err
	}
	if k.file.fd < 0 {
		if err := r.untimed(func() error {
			return k.file.create(r.notice, Header{File: "pagesync", Size: HeaderSize + int64(len(k.buf))})
		}); err != nil {
			return res, err
		}
	}
	for range k.ops {
		if err := r.waitBudget(ctx, len(k.buf)); err != nil {
			return res, err
		}
		k.calls = [2]ioCall{{sys: sysPwrite, fd: k.file.fd, buf: k.buf, off: HeaderSize}, {sys: sysFdatasync, fd: k.file.fd}}
		d, _, err := r.timed(k.file.path, k.calls[:], nil)
		if err != nil {
			k.file.drop()
			return res, err
		}
		r.observe(Sample{Phase: PhasePagesync, Duration: d})
		res.Ops++
		res.Bytes += int64(len(k.buf))
		res.IO += d
	}
	return res, nil
}

func (k *pagesyncer) closeFiles() error {
	k.file.close()
	return nil
}
`

// TestANewKindIsOneFileInThisPackage builds the exporter with newKindFile added to this
// package and nothing else changed (go build -overlay), and runs it: the configuration
// takes the new kind's keys and refuses others, --config.check lists it, and the daemon
// builds, budgets and schedules it and records its samples into its own histogram, with
// its own bucket edges, and its load into the shared counters.
func TestANewKindIsOneFileInThisPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the exporter")
	}
	pkg, err := os.Getwd()
	must(t, err)
	dir := t.TempDir()
	kindFile := filepath.Join(dir, "pagesync.go")
	must(t, os.WriteFile(kindFile, []byte(newKindFile), 0o600))
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "zz_pagesync.go"): kindFile}})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o600))
	bin := filepath.Join(dir, "diskprobe_exporter")
	build := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "../cmd/diskprobe_exporter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with the new kind: %v\n%s", err, out)
	}

	target := filepath.Join(dir, "disk")
	must(t, os.Mkdir(target, 0o700))
	writeConfig := func(probe string) string {
		cfg := filepath.Join(dir, "diskprobe.yml")
		must(t, os.WriteFile(cfg, []byte(fmt.Sprintf("targets:\n  - name: t\n    path: %s\n    %s\n    limits: {min_free: 0}\n", target, probe)), 0o600))
		return cfg
	}
	check := func(probe string) (string, error) {
		out, err := exec.Command(bin, "--config.check", "--config.file", writeConfig(probe)).CombinedOutput()
		return string(out), err
	}
	if out, err := check("pagesync: {bytes: 1MiB}"); err == nil || !strings.Contains(out, `diskprobe.yml:4: targets[0].pagesync: unknown field "bytes"`) {
		t.Errorf("a key the new kind does not list: %v\n%s", err, out)
	}
	if out, err := check("pagesync: {ops: 2, block_size: 8KiB}"); err != nil || !strings.Contains(out, "[pagesync]") {
		t.Fatalf("--config.check with the new kind: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	daemon := exec.Command(bin, "--config.file", writeConfig("pagesync: {ops: 2, block_size: 8KiB}"), "--web.listen-address", addr)
	var log strings.Builder
	daemon.Stdout, daemon.Stderr = &log, &log
	must(t, daemon.Start())
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })

	sample := func(metrics, series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var metrics string
	testenv.WaitFor(t, 30*time.Second, "two rounds of the new kind", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return sample(metrics, `diskprobe_probe_runs_total{probe="pagesync",target="t"}`) >= 2
	})
	// A round under way when the scrape came may have added its samples and its load
	// before its run is counted.
	runs := sample(metrics, `diskprobe_probe_runs_total{probe="pagesync",target="t"}`)
	for series, per := range map[string]float64{
		`diskprobe_pagesync_duration_seconds_bucket{target="t",le="+Inf"}`: 2,
		`diskprobe_probe_io_operations_total{probe="pagesync",target="t"}`: 2,
		`diskprobe_probe_io_bytes_total{probe="pagesync",target="t"}`:      2 * 8192,
	} {
		if got := sample(metrics, series); got < per*runs || got > per*(runs+1) {
			t.Errorf("%s = %v after %v rounds of the new kind, want %v a round", series, got, runs, per)
		}
	}
	if got := sample(metrics, `diskprobe_probe_errors_total{probe="pagesync",target="t"}`); got != 0 {
		t.Errorf("%v failed rounds of the new kind", got)
	}
	if sample(metrics, `diskprobe_pagesync_duration_seconds_bucket{target="t",le="0.25"}`) < 0 {
		t.Errorf("the new kind's histogram lacks its own bucket edge 0.25:\n%s", metrics)
	}
	if t.Failed() {
		t.Logf("the exporter's log:\n%s", log.String())
	}
}
