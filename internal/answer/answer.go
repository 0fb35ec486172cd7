// Package answer waits a bounded time for file system calls on paths that may never
// answer: a hard NFS mount whose server is gone, a stuck FUSE daemon, a dying disk. Such
// a call cannot be cancelled; it is left to finish in a goroutine of its own, and at most
// one is outstanding per path, so asking a hung path again and again (every reload) never
// piles up goroutines. node_exporter's filesystem collector does the same for statfs
// (its stuckMounts).
package answer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CommandWait is how long a one-shot command (config.check, check, cleanup) waits for a
// path to answer before it reports the path as not answering: long enough for a slow but
// working disk, short enough that a package's purge does not hang on a dead NFS server.
// The daemon waits less (a second) at start and on reload, where a path that does not
// answer is not an error: its worker asks it again.
const CommandWait = 5 * time.Second

// Paths tracks the calls outstanding per path.
type Paths struct {
	mu      sync.Mutex
	pending map[string]chan struct{} // closed when the path's outstanding call returns
}

// Call runs fn, which makes file system calls on path, and waits for it at most wait
// (no limit when wait is 0) and until ctx ends. It reports whether fn returned; when it
// did not, fn goes on in its goroutine and the caller must not read what fn writes. When
// a call on path is still outstanding, Call waits for that one first and starts fn only
// once it has returned: a second goroutine would only hang beside the first.
func (p *Paths) Call(ctx context.Context, path string, wait time.Duration, fn func()) bool {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		p.mu.Lock()
		if p.pending == nil {
			p.pending = map[string]chan struct{}{}
		}
		done, busy := p.pending[path]
		if !busy {
			done = make(chan struct{})
			p.pending[path] = done
			go func() {
				defer func() {
					p.mu.Lock()
					delete(p.pending, path)
					p.mu.Unlock()
					close(done)
				}()
				fn()
			}()
		}
		p.mu.Unlock()
		select {
		case <-done:
			if busy {
				continue // the earlier call returned: the path answers again, ask ours
			}
			return true
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// outstanding is how many paths have a call that has not returned.
func (p *Paths) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// NotAnsweredError says that a path did not answer a file system call in time.
type NotAnsweredError struct {
	Path string
	Wait time.Duration
}

func (e *NotAnsweredError) Error() string {
	return fmt.Sprintf("%s did not answer within %s: a hung mount (an NFS server gone, a stuck FUSE daemon) or a dying disk", e.Path, e.Wait)
}
