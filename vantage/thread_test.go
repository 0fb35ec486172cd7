package vantage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

func uniqueName() string { return fmt.Sprintf("vtg%d", rand.IntN(1e9)) }

func setIOPrio(t *testing.T, pid int, p IOPrio) {
	t.Helper()
	if _, _, errno := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(pid), uintptr(p)); errno != 0 {
		t.Fatal(errno)
	}
}

func tasksOf(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

func TestThreadRunsInTheProcesssCgroupAndClassAndEndsWithItsGoroutine(t *testing.T) {
	cg := testenv.BlkioCgroup(t)
	name := uniqueName()
	p := testenv.Sleeper(t, name)
	cg.Add(p.Process.Pid)
	want := ClassBE<<ioprioClassShift | 2
	setIOPrio(t, p.Process.Pid, want)

	r := &Resolver{Spec: Spec{Process: name}}
	v, err := r.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if v.PID != p.Process.Pid || v.BlkioPath != cg.Name() || v.IOPrio != want {
		t.Fatalf("resolved %+v, want PID %d in %s at %s", v, p.Process.Pid, cg.Name(), want)
	}
	th := StartThread()
	if err := th.Join(v); err != nil {
		t.Fatal(err)
	}
	tid := strconv.Itoa(th.TID())
	if !slices.Contains(tasksOf(t, cg.Path), tid) {
		t.Fatalf("thread %s not in %s/tasks: %v", tid, cg.Path, tasksOf(t, cg.Path))
	}
	var inside IOPrio
	th.Do(func() { inside, _ = ProcessIOPrio(unix.Gettid()) })
	if inside != want {
		t.Fatalf("the thread's I/O priority is %s, want %s", inside, want)
	}
	// Only the joined thread moved: this goroutine's thread and the process stay out.
	if self, _ := readCgroups("/proc/self/cgroup"); self["blkio"] == cg.Name() {
		t.Fatal("the whole process moved into the cgroup")
	}

	th.Stop()
	testenv.WaitFor(t, 10*time.Second, "the joined thread to end", func() bool {
		_, err := os.Stat("/proc/self/task/" + tid)
		return os.IsNotExist(err)
	})
	if slices.Contains(tasksOf(t, cg.Path), tid) {
		t.Fatal("the ended thread is still listed in the cgroup")
	}
}

func TestThreadFollowsARestartedAndAMovedProcessAndLeavesWhenItIsGone(t *testing.T) {
	a, b := testenv.BlkioCgroup(t), testenv.BlkioCgroup(t)
	name := uniqueName()
	first := testenv.Sleeper(t, name)
	a.Add(first.Process.Pid)
	r := &Resolver{Spec: Spec{Process: name}}
	th := StartThread()
	defer th.Stop()
	in := func(cg *testenv.Cgroup) bool { return slices.Contains(tasksOf(t, cg.Path), strconv.Itoa(th.TID())) }
	join := func() View {
		t.Helper()
		v, err := r.Resolve()
		if err != nil {
			t.Fatal(err)
		}
		if err := th.Join(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := join(); v.PID != first.Process.Pid || !in(a) {
		t.Fatalf("first: %+v", v)
	}

	// Restarted: a new PID in the same cgroup.
	_ = first.Process.Kill()
	_ = first.Wait()
	second := testenv.Sleeper(t, name)
	a.Add(second.Process.Pid)
	if v := join(); v.PID != second.Process.Pid || !in(a) {
		t.Fatalf("restarted: %+v", v)
	}

	// Moved to another cgroup.
	b.Add(second.Process.Pid)
	if v := join(); v.BlkioPath != b.Name() || !in(b) || in(a) {
		t.Fatalf("moved: %+v, in a %v, in b %v", v, in(a), in(b))
	}

	// Gone: nothing to join; leaving frees the cgroup for its removal.
	_ = second.Process.Kill()
	_ = second.Wait()
	if _, err := r.Resolve(); !errorsIs(err, ErrNoProcess) {
		t.Fatalf("resolving a gone process: %v, want ErrNoProcess", err)
	}
	if err := th.Leave(); err != nil {
		t.Fatal(err)
	}
	if in(b) {
		t.Fatal("the thread stayed in the cgroup of a process that is gone")
	}
}

func TestAProcessNameTwoProcessesShareIsRefusedNamingBoth(t *testing.T) {
	testenv.RequireRoot(t)
	name := uniqueName()
	a, b := testenv.Sleeper(t, name), testenv.Sleeper(t, name)
	_, err := (&Resolver{Spec: Spec{Process: name}}).Resolve()
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), strconv.Itoa(a.Process.Pid)) || !strings.Contains(err.Error(), strconv.Itoa(b.Process.Pid)) {
		t.Fatalf("got %v", err)
	}
}
