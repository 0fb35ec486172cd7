package framework

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// Prometheus is a running Debian prometheus, for tests and benchmarks that must see what
// Prometheus itself sees of a scrape or a rule.
type Prometheus struct {
	Addr string
	cmd  *exec.Cmd
	log  *testenv.SyncBuffer
	done chan struct{}
}

// PrometheusOptions says what a test Prometheus scrapes and evaluates.
type PrometheusOptions struct {
	Jobs     map[string]string // job name → target address, scraped every Interval
	Rules    []string          // rule files
	Interval time.Duration     // scrape and evaluation interval (default 1s); the scrape timeout equals it
	Flags    []string          // extra command-line flags, e.g. --enable-feature=native-histograms
	Binary   string            // the prometheus to run (a PrometheusServer's Bin); default: Debian's
	// JobConfig are YAML lines added to every job's scrape config, e.g.
	// "scrape_native_histograms: true" (Prometheus 3).
	JobConfig []string
	// Instances scrapes a job's address once per name given here, each as that `instance`:
	// one exporter seen as several members of a group.
	Instances map[string][]string
	// EvalInterval is the rule evaluation interval, when it differs from Interval.
	EvalInterval time.Duration
	// ScrapeConfigs is YAML appended under scrape_configs, for jobs Jobs cannot describe
	// (many targets, per-target labels): list items indented by two spaces.
	ScrapeConfigs string
	// DataDir is the TSDB directory, for a test that put blocks there first (a backfill);
	// default: a new temporary directory.
	DataDir string
	// ReadyTimeout is how long it may take to become ready (default 30s): opening a large
	// backfilled TSDB takes longer.
	ReadyTimeout time.Duration
}

// StartPrometheus runs a prometheus (Debian's unless opts.Binary names another) on a free loopback port with its storage in a
// temporary directory. It is killed by its own pid in cleanup; its log is printed if the
// test failed.
func StartPrometheus(t testing.TB, opts PrometheusOptions) *Prometheus {
	t.Helper()
	if opts.Binary == "" {
		testenv.RequireTools(t, "prometheus")
		opts.Binary = "prometheus"
	}
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	if opts.EvalInterval == 0 {
		opts.EvalInterval = opts.Interval
	}
	rules, _ := json.Marshal(opts.Rules)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\nrule_files: %s\nscrape_configs:\n",
		opts.Interval, opts.Interval, opts.EvalInterval, rules)
	jobs := make([]string, 0, len(opts.Jobs))
	for job := range opts.Jobs {
		jobs = append(jobs, job)
	}
	sort.Strings(jobs)
	for _, job := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n", job)
		if len(opts.Instances[job]) == 0 {
			fmt.Fprintf(&cfg, "      - targets: [%q]\n", opts.Jobs[job])
		}
		for _, instance := range opts.Instances[job] {
			fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {instance: %q}\n", opts.Jobs[job], instance)
		}
		for _, line := range opts.JobConfig {
			fmt.Fprintf(&cfg, "    %s\n", line)
		}
	}
	cfg.WriteString(opts.ScrapeConfigs)
	dir := t.TempDir()
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(dir, "data")
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{Addr: FreePort(t), log: &testenv.SyncBuffer{}}
	args := append([]string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + dataDir,
		"--web.listen-address=" + p.Addr,
		"--log.level=warn",
	}, opts.Flags...)
	p.cmd = exec.Command(opts.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p.done = done
	go func() { p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	deadline := time.Now().Add(opts.ReadyTimeout)
	for {
		resp, err := http.Get("http://" + p.Addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited: %v\n%s", p.cmd.ProcessState, p.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after %s\n%s", opts.ReadyTimeout, p.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills the Prometheus (by its own pid) before cleanup would, and waits for it to exit:
// a test that is done with one frees its memory for the next.
func (p *Prometheus) Stop() {
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// Pid is the Prometheus process's id.
func (p *Prometheus) Pid() int { return p.cmd.Process.Pid }

// API GETs a Prometheus HTTP API path and decodes its data field into out.
func (p *Prometheus) API(path string, params url.Values, out any) error {
	return p.APIWithin(path, params, 10*time.Second, out)
}

// APIWithin is API with a time limit of its own, for queries that read a fleet's history.
func (p *Prometheus) APIWithin(path string, params url.Values, limit time.Duration, out any) error {
	client := http.Client{Timeout: limit}
	resp, err := client.Get("http://" + p.Addr + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// QueryResult is an instant query's answer.
type QueryResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} `json:"result"`
}

// Query runs an instant query.
func (p *Prometheus) Query(expr string) (QueryResult, error) {
	var r QueryResult
	err := p.API("/api/v1/query", url.Values{"query": {expr}}, &r)
	return r, err
}

// SeriesCount runs an instant query and counts the series it returns.
func (p *Prometheus) SeriesCount(expr string) (int, error) {
	r, err := p.Query(expr)
	if err != nil {
		return 0, err
	}
	if r.ResultType == "scalar" {
		return 1, nil
	}
	return len(r.Result), nil
}

// Value is the value of the first series an instant query returns.
func (p *Prometheus) Value(expr string) (float64, error) {
	r, err := p.Query(expr)
	if err != nil {
		return 0, err
	}
	if len(r.Result) == 0 {
		return 0, fmt.Errorf("no series for %s", expr)
	}
	var v float64
	s, _ := r.Result[0].Value[1].(string)
	_, err = fmt.Sscan(s, &v)
	return v, err
}
