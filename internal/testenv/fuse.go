package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// HangFS is a FUSE passthrough to a temporary directory whose operations can be made to
// block, as those of a hard NFS mount whose server is gone or of a stuck FUSE daemon do,
// and released on demand. fsfreeze blocks writes only; HangFS also blocks what fsfreeze
// lets through: lookup, getattr (stat), statfs, open, read.
//
// The server runs in the test process: a blocked request holds one of its goroutines,
// and the others go on serving. The test process itself must not touch Dir while it is
// hung (the exporter under test is a child process).
type HangFS struct {
	Dir     string // the mount point
	Backing string // the directory it passes through to

	server *fuse.Server
	mu     sync.Mutex
	hang   map[string]bool // ops held; nil when none is
	all    bool            // every op is held
	gate   chan struct{}   // closed to release the ops held
	conn   uint32          // the FUSE connection, /sys/fs/fuse/connections/<conn>
	held   atomic.Int64    // requests blocked right now
	ever   atomic.Int64    // requests ever blocked
	faults map[string]*fault

	opts    HangFSOptions
	touched map[touchedBlock]bool    // blocks written at least once, for FirstWriteDelay
	firsts  atomic.Int64             // writes delayed as first writes
	delays  map[string]time.Duration // by op: how long each call waits before it is served
}

// touchedBlock is a FirstWriteBlock-sized block of a file, by its inode.
type touchedBlock struct {
	node  uint64
	block int64
}

// fault is an error injected into an operation: the next left calls answer errno.
type fault struct {
	errno    syscall.Errno
	left     int
	answered int
}

// HangFSOptions choose how the filesystem behaves when nothing is hung.
type HangFSOptions struct {
	// Fallocate passes fallocate through. Off by default, as on bindfs, NFS before 4.2 and
	// most FUSE filesystems: the kernel then answers fallocate(2) with EOPNOTSUPP.
	Fallocate bool
	// FirstWriteDelay delays each write that touches a FirstWriteBlock of its file never
	// written before (once per write, however many such blocks it touches): a cloud volume
	// that allocates lazily, slow on first writes and fast on rewrites.
	FirstWriteDelay time.Duration
	// ReadDelay delays every read: a slow device that is not rate-limited (the server
	// serves requests side by side).
	ReadDelay time.Duration
}

// FirstWriteBlock is the block FirstWriteDelay tracks.
const FirstWriteBlock = 4096

// FUSE operations HangFS can hold, by the names Hang takes.
const (
	OpLookup    = "lookup"
	OpGetattr   = "getattr"
	OpStatfs    = "statfs"
	OpOpen      = "open"
	OpRead      = "read"
	OpWrite     = "write"
	OpFsync     = "fsync"
	OpMkdir     = "mkdir"
	OpCreate    = "create"
	OpFallocate = "fallocate"
	OpFlush     = "flush"
	OpSetattr   = "setattr"
	OpUnlink    = "unlink"
	OpLseek     = "lseek"
	OpAccess    = "access"
	OpReaddir   = "readdir"
	OpStatx     = "statx"
)

// MountHangFS mounts a HangFS over a fresh temporary directory (on the test machine's
// disk, so that O_DIRECT passes through). Cleanup always lazily unmounts it, then
// releases whatever is held, so that no process stays blocked on it.
func MountHangFS(t testing.TB, opts HangFSOptions) *HangFS {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("needs /dev/fuse: %v", err)
	}
	h := &HangFS{Backing: t.TempDir(), gate: make(chan struct{}), opts: opts, touched: map[touchedBlock]bool{}}
	h.Dir = filepath.Join(t.TempDir(), "fuse")
	if err := os.Mkdir(h.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.NewLoopbackRoot(h.Backing)
	if err != nil {
		t.Fatal(err)
	}
	// No attribute or entry caching: every stat reaches the server (and can hang), as on
	// a network filesystem whose cache has expired.
	var zero time.Duration
	fsOpts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true, // root: mount(2) itself, no fusermount needed
			FsName:            "diskprobe-hangfs",
			Name:              "hangfs",
			DisableXAttrs:     true,
		},
	}
	raw := &hangRaw{RawFileSystem: fs.NewNodeFS(root, fsOpts), h: h, fallocate: opts.Fallocate}
	server, err := fuse.NewServer(raw, h.Dir, &fsOpts.MountOptions)
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	h.server = server
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		t.Fatalf("FUSE mount: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(h.Dir, &st); err == nil {
		h.conn = unix.Minor(st.Dev)
	}
	closeOnExec("/dev/fuse")
	t.Cleanup(h.cleanup)
	return h
}

// closeOnExec marks the descriptors of this process open on dev close-on-exec. go-fuse
// opens /dev/fuse without O_CLOEXEC, so every exporter a test starts would hold the FUSE
// connection open: a test process that dies would leave it (and anything stuck on it)
// to an exporter that may itself be stuck on it.
func closeOnExec(dev string) {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == dev {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
			}
		}
	}
}

// Hang makes the given operations (all of them when none is named) block until Release.
func (h *HangFS) Hang(ops ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = len(ops) == 0
	h.hang = map[string]bool{}
	for _, op := range ops {
		h.hang[op] = true
	}
}

// Release lets every held operation go on, and holds no new one.
func (h *HangFS) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all, h.hang = false, nil
	close(h.gate)
	h.gate = make(chan struct{})
}

// Fail makes the next n calls of each of ops answer errno instead of being served: EINTR
// is what a FUSE daemon that honours the kernel's FUSE_INTERRUPT answers when the calling
// thread got a signal (in Go, the runtime's preemption), EIO what a failing disk gives.
// An op's injected errors come after it is released from a Hang.
func (h *HangFS) Fail(errno syscall.Errno, n int, ops ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.faults == nil {
		h.faults = map[string]*fault{}
	}
	for _, op := range ops {
		h.faults[op] = &fault{errno: errno, left: n}
	}
}

// Failed is how many calls of op answered the error injected by the last Fail.
func (h *HangFS) Failed(op string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.faults[op]; f != nil {
		return f.answered
	}
	return 0
}

// FirstWrites is how many writes FirstWriteDelay delayed.
func (h *HangFS) FirstWrites() int { return int(h.firsts.Load()) }

// firstWrite records the blocks a write touches and says whether any was new.
func (h *HangFS) firstWrite(node uint64, off int64, n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	fresh := false
	for b := off / FirstWriteBlock; b*FirstWriteBlock < off+int64(n); b++ {
		k := touchedBlock{node, b}
		if !h.touched[k] {
			h.touched[k], fresh = true, true
		}
	}
	return fresh
}

// Delay makes every later call of each of ops wait d before it is served (0: none): a
// slow device behind the mount, not a hung one.
func (h *HangFS) Delay(d time.Duration, ops ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delays == nil {
		h.delays = map[string]time.Duration{}
	}
	for _, op := range ops {
		h.delays[op] = d
	}
}

// Held is how many requests are blocked right now.
func (h *HangFS) Held() int { return int(h.held.Load()) }

// EverHeld is how many requests have been blocked since the mount.
func (h *HangFS) EverHeld() int { return int(h.ever.Load()) }

// WaitHeld waits until at least n requests are blocked.
func (h *HangFS) WaitHeld(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, fmt.Sprintf("%d request(s) blocked on the FUSE mount", n), func() bool { return h.Held() >= n })
}

// gateFor blocks the calling request while op is hung, then answers the error injected
// into op by Fail, if any is left; fuse.OK lets the request be served.
func (h *HangFS) gateFor(op string) fuse.Status {
	h.mu.Lock()
	if h.all || h.hang[op] {
		gate := h.gate
		h.mu.Unlock()
		h.held.Add(1)
		h.ever.Add(1)
		// Not on the request's cancel channel: the kernel sends FUSE_INTERRUPT when the
		// blocked thread gets any signal, and a hung NFS or FUSE server would not answer it
		// either.
		<-gate
		h.held.Add(-1)
		h.mu.Lock()
	}
	if d := h.delays[op]; d > 0 {
		h.mu.Unlock()
		time.Sleep(d)
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	if f := h.faults[op]; f != nil && f.left > 0 {
		f.left--
		f.answered++
		return fuse.Status(f.errno)
	}
	return fuse.OK
}

func (h *HangFS) cleanup() {
	// Lazily unmount first, so nothing new reaches the server, then release what is held.
	if err := unix.Unmount(h.Dir, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		fmt.Fprintf(os.Stderr, "testenv: lazy unmount of %s: %v\n", h.Dir, err)
	}
	h.Release()
	done := make(chan struct{})
	go func() { h.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		// Abort the connection: whatever still waits on it fails with ENOTCONN.
		abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", h.conn)
		err := os.WriteFile(abort, []byte("1"), 0o200)
		fmt.Fprintf(os.Stderr, "testenv: FUSE server of %s still has requests in flight 5s after release; aborted the connection: %v\n", h.Dir, err)
	}
}

// hangRaw is the loopback filesystem with a gate before every operation that a hung
// server would leave unanswered.
type hangRaw struct {
	fuse.RawFileSystem
	h         *HangFS
	fallocate bool
}

func (r *hangRaw) Lookup(c <-chan struct{}, in *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.h.gateFor(OpLookup); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Lookup(c, in, name, out)
}

func (r *hangRaw) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := r.h.gateFor(OpGetattr); !st.Ok() {
		return st
	}
	return r.RawFileSystem.GetAttr(c, in, out)
}

func (r *hangRaw) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := r.h.gateFor(OpSetattr); !st.Ok() {
		return st
	}
	return r.RawFileSystem.SetAttr(c, in, out)
}

func (r *hangRaw) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if st := r.h.gateFor(OpStatfs); !st.Ok() {
		return st
	}
	return r.RawFileSystem.StatFs(c, in, out)
}

func (r *hangRaw) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if st := r.h.gateFor(OpStatx); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Statx(c, in, out)
}

func (r *hangRaw) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if st := r.h.gateFor(OpAccess); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Access(c, in)
}

func (r *hangRaw) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.h.gateFor(OpMkdir); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Mkdir(c, in, name, out)
}

func (r *hangRaw) Unlink(c <-chan struct{}, in *fuse.InHeader, name string) fuse.Status {
	if st := r.h.gateFor(OpUnlink); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Unlink(c, in, name)
}

func (r *hangRaw) Rmdir(c <-chan struct{}, in *fuse.InHeader, name string) fuse.Status {
	if st := r.h.gateFor(OpUnlink); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Rmdir(c, in, name)
}

func (r *hangRaw) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if st := r.h.gateFor(OpCreate); !st.Ok() {
		return st
	}
	st := r.RawFileSystem.Create(c, in, name, out)
	noPassthrough(&out.OpenOut)
	return st
}

func (r *hangRaw) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := r.h.gateFor(OpOpen); !st.Ok() {
		return st
	}
	st := r.RawFileSystem.Open(c, in, out)
	noPassthrough(out)
	return st
}

// noPassthrough keeps reads and writes going through the server: as root on Linux ≥ 6.9
// go-fuse's loopback asks the kernel to pass them straight to the backing file, where
// nothing could hold them.
func noPassthrough(out *fuse.OpenOut) {
	out.OpenFlags &^= fuse.FOPEN_PASSTHROUGH
	out.BackingID = 0
}

func (r *hangRaw) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if st := r.h.gateFor(OpRead); !st.Ok() {
		return nil, st
	}
	if d := r.h.opts.ReadDelay; d > 0 {
		time.Sleep(d)
	}
	return r.RawFileSystem.Read(c, in, buf)
}

func (r *hangRaw) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if st := r.h.gateFor(OpWrite); !st.Ok() {
		return 0, st
	}
	if d := r.h.opts.FirstWriteDelay; d > 0 && r.h.firstWrite(in.NodeId, int64(in.Offset), len(data)) {
		r.h.firsts.Add(1)
		time.Sleep(d)
	}
	return r.RawFileSystem.Write(c, in, data)
}

func (r *hangRaw) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if st := r.h.gateFor(OpLseek); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Lseek(c, in, out)
}

func (r *hangRaw) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if st := r.h.gateFor(OpFlush); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Flush(c, in)
}

func (r *hangRaw) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if st := r.h.gateFor(OpFsync); !st.Ok() {
		return st
	}
	return r.RawFileSystem.Fsync(c, in)
}

func (r *hangRaw) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if st := r.h.gateFor(OpFsync); !st.Ok() {
		return st
	}
	return r.RawFileSystem.FsyncDir(c, in)
}

// Fallocate answers ENOSYS unless passed through: the kernel then remembers that the
// filesystem has none and fails every later fallocate(2) with EOPNOTSUPP, as on bindfs.
func (r *hangRaw) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if st := r.h.gateFor(OpFallocate); !st.Ok() {
		return st
	}
	if !r.fallocate {
		return fuse.ENOSYS
	}
	return r.RawFileSystem.Fallocate(c, in)
}

func (r *hangRaw) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := r.h.gateFor(OpReaddir); !st.Ok() {
		return st
	}
	return r.RawFileSystem.OpenDir(c, in, out)
}

func (r *hangRaw) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := r.h.gateFor(OpReaddir); !st.Ok() {
		return st
	}
	return r.RawFileSystem.ReadDir(c, in, out)
}

func (r *hangRaw) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := r.h.gateFor(OpReaddir); !st.Ok() {
		return st
	}
	return r.RawFileSystem.ReadDirPlus(c, in, out)
}
