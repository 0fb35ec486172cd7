package vantage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Thread is an OS thread that joins a process's blkio cgroup and takes its I/O priority
// (Join), and runs functions there (Do): the I/O they issue is charged to that cgroup's
// limits and scheduled in that class, as the process's own is.
//
// Its goroutine locks the thread for the thread's whole life and never unlocks it, so no
// other goroutine ever runs on a thread that sits in another process's cgroup, and when
// Stop ends the goroutine, still locked, the runtime ends the thread instead of returning
// it to its pool (runtime.LockOSThread). It leaves the cgroup first (Leave), so that an
// exiting thread never holds another's cgroup from being removed. Nor can a thread the
// runtime starts later be cloned from it, and so inherit its cgroup: the runtime has a
// thread that is not locked create new threads for a locked one (runtime.newm's
// template thread).
//
// A probe round that runs in Do locks and unlocks its goroutine again (probe's
// cpuClock); the calls nest, so the round stays on this thread throughout, its yields
// to the scheduler included.
type Thread struct {
	work   chan func()
	tid    int
	joined *View // only the thread's goroutine reads or writes it
}

// StartThread starts the thread, joined to nothing: this process's cgroup and class.
func StartThread() *Thread {
	t := &Thread{work: make(chan func())}
	ready := make(chan int)
	go t.loop(ready)
	t.tid = <-ready
	return t
}

func (t *Thread) loop(ready chan<- int) {
	runtime.LockOSThread() // never unlocked: see Thread
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread, whose cgroup /proc/PID/cgroup reports as the whole
		// process's and which never ends (the daemon keeps it for main: this is a test
		// binary's). Another thread takes over: while this one is held here, the other
		// cannot be it.
		relay := make(chan int)
		go t.loop(relay)
		ready <- <-relay
		runtime.UnlockOSThread()
		return
	}
	ready <- unix.Gettid()
	for fn := range t.work {
		fn()
	}
	_ = t.leave()
}

// TID is the thread's id.
func (t *Thread) TID() int { return t.tid }

// Do runs fn on the thread and waits for it.
func (t *Thread) Do(fn func()) {
	done := make(chan struct{})
	t.work <- func() {
		defer close(done)
		fn()
	}
	<-done
}

// Stop ends the thread once what it runs returns; it does not wait. No Do after it.
func (t *Thread) Stop() { close(t.work) }

// Join moves the thread into v's cgroup and priority, unless it is there already, and
// checks that the kernel put it there.
func (t *Thread) Join(v View) (err error) {
	t.Do(func() { err = t.join(v) })
	return err
}

// Leave moves the thread back into this process's own cgroup and priority.
func (t *Thread) Leave() (err error) {
	t.Do(func() { err = t.leave() })
	return err
}

// ErrThreadedOnly is the cgroup v2 refusal: a thread may only join a cgroup of another
// process's where both are in one threaded subtree, which a service's cgroup never is.
var ErrThreadedOnly = errors.New("on cgroup v2 a thread can join another process's cgroup only within a threaded subtree (cgroup.threads), which a service's or a pod's cgroup is not: the vantage needs the blkio hierarchy of cgroup v1 (a hybrid host)")

func (t *Thread) join(v View) error {
	if t.joined != nil && t.joined.Same(v) {
		return nil
	}
	file := "tasks"
	if v.V2 {
		file = "cgroup.threads"
	}
	if err := os.WriteFile(filepath.Join(v.BlkioDir, file), []byte(strconv.Itoa(t.tid)), 0); err != nil {
		t.joined = nil
		if v.V2 && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			return fmt.Errorf("joining %s: %w (%w)", v.BlkioPath, ErrThreadedOnly, err)
		}
		return fmt.Errorf("joining cgroup %s: %w", v.BlkioPath, err)
	}
	if err := setThreadIOPrio(v.IOPrio); err != nil {
		t.joined = nil
		return err
	}
	if err := t.check(v.BlkioPath, v.V2, v.IOPrio); err != nil {
		t.joined = nil
		return err
	}
	t.joined = &v
	return nil
}

// leave moves the thread back into the process's own blkio cgroup (the main thread's,
// which nothing moves) and priority.
func (t *Thread) leave() error {
	if t.joined == nil {
		return nil
	}
	own, err := Own()
	if err != nil {
		return err
	}
	t.joined = nil
	return t.join(own)
}

// Own is this process's view: its own cgroup and I/O priority.
func Own() (View, error) {
	r := Resolver{ProcFS: "/proc"}
	m, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return View{}, err
	}
	return r.processView(m, os.Getpid())
}

// check reads where the kernel has the thread: its cgroup and its priority.
func (t *Thread) check(path string, v2 bool, prio IOPrio) error {
	groups, err := readCgroups(fmt.Sprintf("/proc/self/task/%d/cgroup", t.tid))
	if err != nil {
		return err
	}
	key := "blkio"
	if v2 {
		key = ""
	}
	if got := groups[key]; got != path {
		return fmt.Errorf("the probe thread is in cgroup %q after joining %q", got, path)
	}
	got, err := ProcessIOPrio(t.tid)
	if err != nil {
		return err
	}
	if got != prio {
		return fmt.Errorf("the probe thread has I/O priority %s after taking %s", got, prio)
	}
	return nil
}
