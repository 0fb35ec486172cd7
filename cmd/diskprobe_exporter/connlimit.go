package main

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit caps the connections the HTTP server holds, over all its listeners. Every
// connection costs a descriptor (from the same RLIMIT_NOFILE the probes open their files
// under), a goroutine and about 20 KiB: 3,000 idle keep-alive connections took the exporter
// from 15 to 75 MB and 3,016 descriptors. At the cap a listener accepts nothing more: new
// connections wait in the kernel's accept queue, where they cost the process nothing.
//
// A cap alone would let idle connections lock a scrape out until the idle timeout, so at
// the cap the connection idle the longest is closed to make room, and failing that, the
// oldest that has sent nothing for silentGrace since it was accepted. A connection in the
// middle of a request is never closed for room; the server's timeouts bound those. (An
// HTTP client whose idle connection was closed retries a GET on a new one, as Prometheus'
// does.)
type connLimit struct {
	slots chan struct{} // one token a held connection
	mu    sync.Mutex
	conns map[net.Conn]connInfo // the held connections that may be closed for room
}

type connInfo struct {
	since time.Time
	idle  bool // between requests; otherwise not yet sent a byte of its first request
}

// silentGrace is how long a new connection may say nothing before it may be closed for
// room. A client sends its request (or TLS hello) right after connecting; one that has not
// within a second is not a scrape in a hurry.
const silentGrace = time.Second

// roomPoll is how often a listener at the cap looks again for a connection to close.
const roomPoll = 100 * time.Millisecond

func newConnLimit(n int) *connLimit {
	return &connLimit{slots: make(chan struct{}, n), conns: map[net.Conn]connInfo{}}
}

// ConnState is the http.Server's ConnState hook: it tells the limit which connections
// may be closed for room.
func (c *connLimit) ConnState(conn net.Conn, state http.ConnState) {
	// TLS: the limit's own connection is the one under the TLS layer. Closing that does
	// not wait to send close_notify to a client that may not read it.
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.conns[conn] = connInfo{since: time.Now()}
	case http.StateIdle:
		c.conns[conn] = connInfo{since: time.Now(), idle: true}
	default: // active, hijacked, closed
		delete(c.conns, conn)
	}
}

// makeRoom closes one held connection that may be closed: the one idle the longest, else
// the one silent the longest past silentGrace. It reports whether it closed one.
func (c *connLimit) makeRoom(now time.Time) bool {
	c.mu.Lock()
	var victim net.Conn
	var best connInfo
	for conn, info := range c.conns {
		if !info.idle && now.Sub(info.since) < silentGrace {
			continue
		}
		if victim == nil || (info.idle && !best.idle) || (info.idle == best.idle && info.since.Before(best.since)) {
			victim, best = conn, info
		}
	}
	if victim != nil {
		delete(c.conns, victim)
	}
	c.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close() // gives its slot back
	return true
}

// Listener is l held to the limit.
func (c *connLimit) Listener(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, limit: c, closed: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	limit     *connLimit
	closeOnce sync.Once
	closed    chan struct{}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	if !l.acquire() {
		return nil, net.ErrClosed
	}
	conn, err := l.Listener.Accept()
	if err != nil {
		<-l.limit.slots
		return nil, err
	}
	return &limitedConn{Conn: conn, release: func() { <-l.limit.slots }}, nil
}

// acquire takes a slot, closing held connections for room while there is none; false
// once the listener is closed.
func (l *limitedListener) acquire() bool {
	for {
		select {
		case l.limit.slots <- struct{}{}:
			return true
		case <-l.closed:
			return false
		default:
		}
		if l.limit.makeRoom(time.Now()) {
			continue
		}
		wait := time.NewTimer(roomPoll)
		select {
		case l.limit.slots <- struct{}{}:
			wait.Stop()
			return true
		case <-l.closed:
			wait.Stop()
			return false
		case <-wait.C:
		}
	}
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its slot back once, at its first Close: by the server, or by makeRoom.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
