package sharding

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
)

// vmLine is a line of VictoriaMetrics' JSON line format (/api/v1/import, /api/v1/export).
type vmLine struct {
	Metric     map[string]string `json:"metric"`
	Values     []float64         `json:"values"`
	Timestamps []int64           `json:"timestamps"`
}

// backendRun is what one backend made of the layout's scenarios, and what it cost.
type backendRun struct {
	Results []*alertreplay.Result
	Load    time.Duration // putting the series in
	Eval    time.Duration // evaluating the rules over every scenario's span
	Samples int
}

// runVictoriaMetrics imports every scenario's series into a VictoriaMetrics single-node
// (/api/v1/import, with their timestamps), replays ruleFile over the layout's whole span with
// vmalert's replay mode (range queries, recorded series and ALERTS written back through remote
// write), then reads ALERTS back and counts firings as the replay does.
func runVictoriaMetrics(t *testing.T, bin string, lay *layout, probing alertreplay.Probing, ruleFile string, evalEvery time.Duration) *backendRun {
	dir := t.TempDir()
	port := freePort(t)
	base := "http://" + addr(port)
	start(t, dir, "victoria-metrics", filepath.Join(bin, "victoria-metrics"),
		"-storageDataPath="+filepath.Join(dir, "data"), "-retentionPeriod=100y", "-httpListenAddr="+addr(port),
		// Backfilled data: a cached response would hide samples written after it (vmalert's).
		"-search.disableCache", "-loggerLevel=WARN")
	waitReady(t, "victoria-metrics", base+"/health", time.Minute)

	run := &backendRun{}
	began := time.Now()
	for i := range lay.scenarios {
		pr, pw := io.Pipe()
		counted := make(chan int, 1)
		go func() {
			n := 0
			defer func() { counted <- n }()
			w := bufio.NewWriter(pw)
			enc := json.NewEncoder(w)
			var err error
			for _, s := range lay.series(i, probing, nil) {
				line := vmLine{Metric: s.Labels.Map(), Values: s.V, Timestamps: s.T}
				n += len(s.V)
				if err = enc.Encode(&line); err != nil {
					break
				}
			}
			if err == nil {
				err = w.Flush()
			}
			pw.CloseWithError(err)
		}()
		resp, err := http.Post(base+"/api/v1/import", "application/json", pr)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		run.Samples += <-counted
		if resp.StatusCode/100 != 2 {
			t.Fatalf("import of %s: %s: %s", lay.scenarios[i].Name, resp.Status, body)
		}
	}
	flush(t, base)
	run.Load = time.Since(began)

	began = time.Now()
	log, err := os.Create(filepath.Join(dir, "vmalert.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "vmalert"),
		"-rule="+ruleFile, "-datasource.url="+base, "-remoteWrite.url="+base,
		"-httpListenAddr="+addr(freePort(t)), "-evaluationInterval="+evalEvery.String(),
		"-replay.timeFrom="+lay.From().Format(time.RFC3339), "-replay.timeTo="+lay.To().Format(time.RFC3339),
		"-replay.disableProgressBar",
		// A rule reads what the rules before it recorded, a whole range at once: vmalert flushes
		// its remote write every 500 ms here, and a series VictoriaMetrics has not seen before
		// took 3-5 s to be found by a query (measured here: with 3 s between two chained rules
		// the second recorded nothing, with 5 s all of it). 6 s a rule: about 8 of the replay's
		// minutes.
		"-replay.rulesDelay=6s", "-remoteWrite.flushInterval=500ms",
		"-remoteWrite.maxQueueSize=20000000", "-remoteWrite.maxBatchSize=100000",
		"-replay.maxDatapointsPerQuery=10000", "-replay.ruleEvaluationConcurrency=2",
		"-loggerLevel=WARN")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(log.Name())
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Fatalf("vmalert replay: %v\n%s", err, b)
	}
	flush(t, base)
	run.Eval = time.Since(began)
	if d, err := time.ParseDuration(os.Getenv("DISKPROBE_SHARDING_PAUSE")); err == nil {
		t.Logf("VictoriaMetrics at %s, for %v", base, d)
		time.Sleep(d)
	}

	firing := map[int]map[time.Time][]alertreplay.Active{}
	q := url.Values{"match[]": {`ALERTS{alertstate="firing"}`},
		"start": {strconv.FormatInt(lay.From().Unix(), 10)}, "end": {strconv.FormatInt(lay.To().Unix(), 10)}}
	resp, err := http.Get(base + "/api/v1/export?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("export: %s: %s", resp.Status, b)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line vmLine
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for _, ms := range line.Timestamps {
			i, own, ok := lay.at(time.UnixMilli(ms).UTC())
			if !ok {
				continue
			}
			if firing[i] == nil {
				firing[i] = map[time.Time][]alertreplay.Active{}
			}
			firing[i][own] = append(firing[i][own], alertreplay.Active{Alert: line.Metric["alertname"], Severity: line.Metric["severity"],
				Instance: lay.unprefix(i, line.Metric["instance"]), Cluster: lay.unprefix(i, line.Metric[alertreplay.GroupLabel])})
		}
	}
	for i, sc := range lay.scenarios {
		tl := alertreplay.NewTally(sc, len(sc.Members()), evalEvery)
		for _, ts := range sc.EvalTimes(evalEvery) {
			tl.Observe(ts, firing[i][ts])
		}
		run.Results = append(run.Results, tl.Result())
	}
	return run
}

// flush makes what VictoriaMetrics ingested searchable now.
func flush(t *testing.T, base string) {
	resp, err := http.Get(base + "/internal/force_flush")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatal(fmt.Errorf("force_flush: %s", resp.Status))
	}
}
