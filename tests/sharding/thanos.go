package sharding

import (
	"bufio"
	"bytes"
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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
)

// thanosSetup is two Prometheus 3 shards and a third Prometheus holding what the rules record,
// each behind a Thanos sidecar, and a Thanos querier over the three.
type thanosSetup struct {
	Query   string // the querier's HTTP base URL
	RuleRW  string // the rule store's remote-write receiver
	Load    time.Duration
	Samples int
}

// writeOpenMetrics writes series as OpenMetrics text (no metadata: every family untyped),
// series by series in time order, for promtool tsdb create-blocks-from openmetrics.
func writeOpenMetrics(path string, series []alertreplay.Sampled) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	w := bufio.NewWriterSize(f, 1<<20)
	n := 0
	for _, s := range series {
		var b strings.Builder
		b.WriteString(s.Labels.Get("__name__"))
		b.WriteByte('{')
		first := true
		s.Labels.Range(func(l labels.Label) {
			if l.Name == "__name__" {
				return
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			fmt.Fprintf(&b, "%s=%q", l.Name, l.Value)
		})
		b.WriteString("} ")
		name := b.String()
		for k, v := range s.V {
			if _, err := fmt.Fprintf(w, "%s%s %d.%03d\n", name, strconv.FormatFloat(v, 'g', -1, 64), s.T[k]/1000, s.T[k]%1000); err != nil {
				return n, err
			}
			n++
		}
	}
	if _, err := w.WriteString("# EOF\n"); err != nil {
		return n, err
	}
	if err := w.Flush(); err != nil {
		return n, err
	}
	return n, f.Close()
}

// startThanos backfills each shard's series (promtool tsdb create-blocks-from openmetrics),
// starts the three Prometheus servers, their sidecars and the querier, and waits until the
// querier answers for every store.
func startThanos(t *testing.T, promBin, thanosBin string, shards [][]alertreplay.Sampled) *thanosSetup {
	dir := t.TempDir()
	ts := &thanosSetup{}
	began := time.Now()
	var endpoints []string
	names := []string{}
	for i := range shards {
		names = append(names, fmt.Sprintf("shard-%d", i))
	}
	names = append(names, "rules")
	for i, name := range names {
		data := filepath.Join(dir, name)
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if i < len(shards) {
			om := filepath.Join(dir, name+".om")
			n, err := writeOpenMetrics(om, shards[i])
			if err != nil {
				t.Fatal(err)
			}
			ts.Samples += n
			out, err := exec.Command(filepath.Join(promBin, "promtool"), "tsdb", "create-blocks-from", "openmetrics",
				"--max-block-duration=24h", om, data).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool tsdb create-blocks-from openmetrics (%s): %v\n%s", name, err, out)
			}
			_ = os.Remove(om)
		}
		// The replica label tells the stores apart; the querier drops it (--query.replica-label).
		cfg := filepath.Join(dir, name+".yml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf("global:\n  external_labels:\n    replica: %s\n", name)), 0o644); err != nil {
			t.Fatal(err)
		}
		pport := freePort(t)
		args := []string{"--config.file=" + cfg, "--storage.tsdb.path=" + data, "--web.listen-address=" + addr(pport),
			"--storage.tsdb.retention.time=100y", "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h",
			"--log.level=warn"}
		if name == "rules" {
			args = append(args, "--web.enable-remote-write-receiver")
			ts.RuleRW = "http://" + addr(pport) + "/api/v1/write"
		}
		start(t, dir, "prometheus-"+name, filepath.Join(promBin, "prometheus"), args...)
		waitReady(t, "prometheus "+name, "http://"+addr(pport)+"/-/ready", 2*time.Minute)
		gport, hport := freePort(t), freePort(t)
		start(t, dir, "sidecar-"+name, filepath.Join(thanosBin, "thanos"), "sidecar",
			"--prometheus.url=http://"+addr(pport), "--tsdb.path="+data,
			"--grpc-address="+addr(gport), "--http-address="+addr(hport), "--log.level=warn")
		waitReady(t, "sidecar "+name, "http://"+addr(hport)+"/-/ready", 2*time.Minute)
		endpoints = append(endpoints, "--endpoint-strict="+addr(gport))
	}
	qport := freePort(t)
	args := append([]string{"query", "--http-address=" + addr(qport), "--grpc-address=" + addr(freePort(t)),
		"--query.replica-label=replica", "--query.lookback-delta=5m", "--log.level=warn"}, endpoints...)
	start(t, dir, "query", filepath.Join(thanosBin, "thanos"), args...)
	ts.Query = "http://" + addr(qport)
	waitReady(t, "thanos query", ts.Query+"/-/ready", 2*time.Minute)
	// Ready before it has the stores' label sets: wait until it lists all of them.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(ts.Query + "/api/v1/stores")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if strings.Count(string(b), `"lastError":null`) >= len(names) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("thanos query does not list its %d stores as healthy", len(names))
		}
		time.Sleep(500 * time.Millisecond)
	}
	ts.Load = time.Since(began)
	return ts
}

// queryFunc evaluates an instant query through the querier's HTTP API, as Thanos Ruler does.
func queryFunc(base string) rules.QueryFunc {
	client := &http.Client{Timeout: 5 * time.Minute}
	return func(ctx context.Context, q string, ts time.Time) (promql.Vector, error) {
		form := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)},
			"dedup": {"true"}, "partial_response": {"false"}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/query", strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				ResultType string          `json:"resultType"`
				Result     json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return nil, fmt.Errorf("%s: %w", resp.Status, err)
		}
		if body.Status != "success" {
			return nil, fmt.Errorf("query %q: %s", q, body.Error)
		}
		parse := func(pair []any) (int64, float64, error) {
			if len(pair) != 2 {
				return 0, 0, fmt.Errorf("sample %v", pair)
			}
			sec, _ := pair[0].(float64)
			s, _ := pair[1].(string)
			v, err := strconv.ParseFloat(s, 64)
			return int64(sec*1000 + 0.5), v, err
		}
		switch body.Data.ResultType {
		case "vector":
			var res []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
			}
			if err := json.Unmarshal(body.Data.Result, &res); err != nil {
				return nil, err
			}
			vec := make(promql.Vector, 0, len(res))
			for _, r := range res {
				tms, v, err := parse(r.Value)
				if err != nil {
					return nil, err
				}
				vec = append(vec, promql.Sample{Metric: labels.FromMap(r.Metric), T: tms, F: v})
			}
			return vec, nil
		case "scalar":
			var pair []any
			if err := json.Unmarshal(body.Data.Result, &pair); err != nil {
				return nil, err
			}
			tms, v, err := parse(pair)
			return promql.Vector{{T: tms, F: v, Metric: labels.EmptyLabels()}}, err
		}
		return nil, fmt.Errorf("query %q: result type %s", q, body.Data.ResultType)
	}
}

// remoteWriter is a storage.Appendable whose commits are Prometheus remote-write requests: the
// rules' output, into the store the querier reads, before the next rule's query.
type remoteWriter struct {
	url    string
	client *http.Client
	mu     sync.Mutex
	err    error // the first failed commit: the rule manager only logs it
}

func (w *remoteWriter) failed(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	return err
}

func (w *remoteWriter) Appender(ctx context.Context) storage.Appender {
	return &rwAppender{w: w, ctx: ctx}
}

// rwAppender implements the methods the rule manager calls; the embedded interface (nil)
// leaves the others unimplemented.
type rwAppender struct {
	storage.Appender
	w      *remoteWriter
	ctx    context.Context
	series []prompb.TimeSeries
}

func (a *rwAppender) Append(_ storage.SeriesRef, l labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	var ls []prompb.Label
	l.Range(func(l labels.Label) { ls = append(ls, prompb.Label{Name: l.Name, Value: l.Value}) })
	a.series = append(a.series, prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Value: v, Timestamp: t}}})
	return 0, nil
}

func (a *rwAppender) SetOptions(*storage.AppendOptions) {}

func (a *rwAppender) Rollback() error { a.series = nil; return nil }

func (a *rwAppender) Commit() error {
	if err := a.commit(); err != nil {
		return a.w.failed(err)
	}
	return nil
}

func (a *rwAppender) commit() error {
	if len(a.series) == 0 {
		return nil
	}
	raw, err := (&prompb.WriteRequest{Timeseries: a.series}).Marshal()
	a.series = nil
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.w.url, bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := a.w.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("remote write: %s: %s", resp.Status, b)
	}
	return nil
}

// runThanos puts each member's series on the shard shardOf gives it, and evaluates ruleFile
// through the querier over every scenario's span, scenario after scenario (the rule store's
// head takes samples in time order).
func runThanos(t *testing.T, promBin, thanosBin string, lay *layout, probing alertreplay.Probing, ruleFile string, evalEvery time.Duration,
	shardOf func(m alertreplay.Member) int) *backendRun {
	shards := make([][]alertreplay.Sampled, 2)
	for i := range lay.scenarios {
		for _, s := range lay.series(i, probing, nil) {
			m := alertreplay.Member{Instance: lay.unprefix(i, s.Labels.Get("instance")), Cluster: lay.unprefix(i, s.Labels.Get(alertreplay.GroupLabel))}
			k := shardOf(m)
			shards[k] = append(shards[k], s)
		}
	}
	setup := startThanos(t, promBin, thanosBin, shards)
	run := &backendRun{Load: setup.Load, Samples: setup.Samples}
	rw := &remoteWriter{url: setup.RuleRW, client: &http.Client{Timeout: time.Minute}}
	began := time.Now()
	for i, sc := range lay.scenarios {
		res, err := alertreplay.ReplayWith(context.Background(), sc, []string{ruleFile}, probing, evalEvery, alertreplay.Options{
			Query: queryFunc(setup.Query), Appendable: rw, Offset: lay.Offset(i), Prefix: lay.Prefix(i)})
		if err != nil {
			t.Fatalf("%s through thanos query: %v", sc.Name, err)
		}
		if rw.err != nil {
			t.Fatalf("%s: writing what the rules record: %v", sc.Name, rw.err)
		}
		t.Logf("thanos: %s in %v", sc.Name, res.Elapsed.Round(time.Second))
		run.Results = append(run.Results, res)
	}
	run.Eval = time.Since(began)
	return run
}
