package main

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// limitedServer serves h on a loopback port held to a cap of n connections.
func limitedServer(t *testing.T, n int, h http.Handler) (addr string, held func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limit := newConnLimit(n)
	srv := &http.Server{Handler: h, ConnState: limit.ConnState, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(limit.Listener(l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), func() int { return len(limit.slots) }
}

// get sends one GET on c and reads its answer.
func get(c net.Conn) (int, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// At the cap, a new client is served at once: the longest idle keep-alive connection is
// closed for it, not left to the idle timeout.
func TestIdleConnectionsAreClosedForANewOneAtTheCap(t *testing.T) {
	addr, held := limitedServer(t, 4, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 50 {
		if code, err := get(dial(t, addr)); err != nil || code != 200 {
			t.Fatalf("a new client at the cap: %d %v", code, err)
		}
		if n := held(); n > 4 {
			t.Fatalf("%d connections held; cap 4", n)
		}
	}
}

// A connection in the middle of a request is never closed for room; a new one waits for a
// slot (in the kernel's accept queue) and is served when one frees.
func TestBusyConnectionsAreNotClosedForRoom(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int64
	addr, _ := limitedServer(t, 1, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if served.Add(1) == 1 {
			<-release
		}
	}))
	first := make(chan error, 1)
	go func() { _, err := get(dial(t, addr)); first <- err }()
	for served.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { _, err := get(dial(t, addr)); second <- err }()
	select {
	case err := <-second:
		t.Fatalf("a second client was served while the cap of 1 was busy: %v", err)
	case err := <-first:
		t.Fatalf("the busy connection was closed for room: %v", err)
	case <-time.After(3 * silentGrace):
	}
	close(release)
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Error(err)
		}
	}
}

// A client that connects and says nothing holds its slot at most silentGrace once a new
// client needs it.
func TestSilentConnectionsAreClosedForANewOneAfterTheGrace(t *testing.T) {
	addr, _ := limitedServer(t, 2, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	silent := []net.Conn{dial(t, addr), dial(t, addr)}
	start := time.Now()
	if code, err := get(dial(t, addr)); err != nil || code != 200 {
		t.Fatalf("a client behind two silent ones: %d %v", code, err)
	}
	if d := time.Since(start); d < silentGrace/2 {
		t.Errorf("served after %s: a silent connection was closed before its grace", d)
	}
	_ = silent[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	var timeout net.Error
	if _, err := silent[0].Read(make([]byte, 1)); err == nil || errors.As(err, &timeout) && timeout.Timeout() {
		t.Errorf("the oldest silent connection was not closed by the server: %v", err)
	}
}

// Closing the listener ends an Accept waiting at the cap.
func TestClosingTheListenerEndsAnAcceptAtTheCap(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := newConnLimit(1).Listener(l)
	dial(t, l.Addr().String())
	if _, err := ll.Accept(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ll.Accept(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	_ = ll.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept at the cap after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept at the cap did not return after Close")
	}
}
