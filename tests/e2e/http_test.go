package e2e

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// startIdle starts an exporter with one quiet target: enough for the HTTP tests.
func startIdle(t *testing.T, args ...string) *framework.Exporter {
	t.Helper()
	dir := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: quiet
    path: %s
    fsync: {interval: 1s, ops: 1, block_size: 4KiB, file_size: 1MiB}
    limits: {min_free: 0}
`, dir))
	return framework.StartExporterWith(t, cfg, framework.ExporterOptions{Args: args})
}

// TestHTTPRefusesWhatItDoesNotServe: unknown paths are 404, known paths with the wrong
// method 405, and a reload only ever happens on POST, and only with --web.enable-lifecycle.
func TestHTTPRefusesWhatItDoesNotServe(t *testing.T) {
	e := startIdle(t)
	base := "http://" + e.Addr
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/metrics", 200},
		{"GET", "/", 200},
		{"GET", "/-/healthy", 200},
		{"GET", "/-/ready", 200},
		{"GET", "/nonexistent", 404},
		{"GET", "/metrics/extra", 404},
		{"GET", "/../../etc/passwd", 404},
		{"POST", "/metrics", 405},
		{"DELETE", "/metrics", 405},
		{"GET", "/-/reload", 405},
		{"PUT", "/-/reload", 405},
		{"POST", "/-/reload", 403},
		{"POST", "/-/healthy", 405},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", c.method, c.path, err)
			continue
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Errorf("%s %s: reading the body: %v", c.method, c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d; want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
	if n := len(logLines(e, "configuration reloaded")); n != 0 {
		t.Errorf("a request other than POST reloaded the configuration (%d times)", n)
	}
	// Headers past MaxHeaderBytes are refused, not buffered.
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("X-Padding", strings.Repeat("x", 128<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("128 KiB of headers: %v; want a 431 answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("128 KiB of headers: %d; want 431", resp.StatusCode)
	}
}

// TestSlowClientDoesNotBlockScrapes opens connections that send their request headers a
// byte at a time (slowloris), and scrapes meanwhile. The scrapes must be as fast as
// without them, and the server must drop the slow connections once ReadHeaderTimeout
// has passed rather than hold them forever.
func TestSlowClientDoesNotBlockScrapes(t *testing.T) {
	e := startIdle(t)
	scrapeP90 := func(n int) time.Duration {
		var lat []time.Duration
		for range n {
			_, d, err := e.Scrape(5 * time.Second)
			if err != nil {
				t.Fatalf("scrape: %v", err)
			}
			lat = append(lat, d)
			time.Sleep(50 * time.Millisecond)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[n*9/10]
	}
	alone := scrapeP90(20)

	const slow = 20
	dropped := make(chan time.Duration, slow)
	request := "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slowloris\r\n"
	for range slow {
		c, err := net.Dial("tcp", e.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			start := time.Now()
			for i := 0; ; i++ {
				if _, err := c.Write([]byte{request[i%len(request)]}); err != nil {
					dropped <- time.Since(start)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	busy := scrapeP90(40)
	t.Logf("scrape p90: %s alone, %s with %d slow clients", fmtDur(alone), fmtDur(busy), slow)
	if busy > 5*alone+50*time.Millisecond {
		t.Errorf("slow clients slowed scrapes down: p90 %s with them, %s without", busy, alone)
	}

	// ReadHeaderTimeout (10 s in main.go) ends every slow connection.
	deadline := time.After(20 * time.Second)
	for i := 0; i < slow; i++ {
		select {
		case d := <-dropped:
			if i == 0 {
				t.Logf("first slow connection dropped after %s", d.Round(100*time.Millisecond))
			}
		case <-deadline:
			t.Fatalf("%d of %d slow connections still open after 20s: no header timeout", slow-i, slow)
		}
	}
}

// TestHTTPServerHasTimeouts reads main.go: the http.Server must set every timeout and a
// header size limit, or one slow or hostile client can hold a connection (and its
// goroutine and buffers) forever.
func TestHTTPServerHasTimeouts(t *testing.T) {
	file := testenv.RepoPath("cmd", "diskprobe_exporter", "main.go")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Server" || fmt.Sprint(sel.X) != "http" {
			return true
		}
		found = true
		set := map[string]string{}
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				set[fmt.Sprint(kv.Key)] = string(src[fset.Position(kv.Value.Pos()).Offset:fset.Position(kv.Value.End()).Offset])
			}
		}
		for _, field := range []string{"ReadHeaderTimeout", "ReadTimeout", "WriteTimeout", "IdleTimeout", "MaxHeaderBytes"} {
			v, ok := set[field]
			if !ok || v == "0" {
				t.Errorf("%s: http.Server without %s", fset.Position(lit.Pos()), field)
				continue
			}
			t.Logf("%s: %s", field, v)
		}
		return true
	})
	if !found {
		t.Fatalf("no http.Server literal in %s", file)
	}
}
