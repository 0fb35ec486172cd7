package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// defaultMaxConnections is --web.max-connections' default (cmd/diskprobe_exporter).
const defaultMaxConnections = 64

// TestThousandsOfIdleConnectionsStayBounded opens 3,000 keep-alive connections to the real
// exporter, each left idle after one request, as a leaky client or anyone who can reach
// the port can. Each held connection cost the exporter a descriptor (the ones its probes
// need), a goroutine and about 20 KiB: 3,000 of them took it from 15 to 75 MB. With the
// connection cap its descriptors and memory grow by what the cap allows, whatever the
// number, and a scrape from a fresh client (Prometheus) still answers: idle connections
// are closed to make room, so they never lock it out.
func TestThousandsOfIdleConnectionsStayBounded(t *testing.T) {
	e := startIdle(t)
	pid := e.Pid()
	for range 5 { // the heap of a serving exporter, not of one that just started
		e.MustScrape()
	}
	fds0, rss0 := fdCount(t, pid), rssBytes(t, pid)

	const n = 3000
	var (
		mu       sync.Mutex
		conns    []net.Conn
		answered atomic.Int64
		refused  atomic.Int64
	)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				c, err := net.DialTimeout("tcp", e.Addr, 30*time.Second)
				if err != nil {
					refused.Add(1)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write([]byte("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					answered.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	opened := time.Since(start)
	time.Sleep(time.Second) // let the exporter close what it closes
	fds1, rss1 := fdCount(t, pid), rssBytes(t, pid)
	t.Logf("%d connections opened in %s (%d answered, %d refused at connect): exporter descriptors %d → %d, RSS %.1f → %.1f MB",
		n, opened.Round(time.Millisecond), answered.Load(), refused.Load(), fds0, fds1, float64(rss0)/1e6, float64(rss1)/1e6)

	// Each held connection is one descriptor; a few more come and go (a probe's file, the
	// scrape of the GC).
	if limit := fds0 + defaultMaxConnections + 16; fds1 > limit {
		t.Errorf("%d idle connections hold %d descriptors in the exporter (%d before); want at most %d (the cap, %d, and 16)", n, fds1, fds0, limit, defaultMaxConnections)
	}
	// 20 KiB measured per idle connection; 100 KiB a connection allowed, and 16 MiB for
	// the heap's own growth between two readings.
	if limit := rss0 + defaultMaxConnections*100<<10 + 16<<20; rss1 > limit {
		t.Errorf("%d idle connections took the exporter's RSS from %.1f to %.1f MB; want at most %.1f MB", n, float64(rss0)/1e6, float64(rss1)/1e6, float64(limit)/1e6)
	}

	// A fresh client, with the idle connections still open on the test's side.
	_, took, err := e.Scrape(30 * time.Second)
	if err != nil {
		t.Fatalf("a fresh scrape with %d idle connections open: %v (after %s)", n, err, took)
	}
	t.Logf("a fresh scrape answered in %s", fmtDur(took))
	alive(t, e)
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// rssBytes is VmRSS of a process.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
