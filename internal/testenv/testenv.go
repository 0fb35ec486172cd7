// Package testenv sets up the real-kernel surroundings the tests of both modules need
// (loop devices, ext4 mounts, frozen filesystems, blkio and cpu cgroups, hung FUSE calls)
// and builds the real exporter binary. What only the tests module runs (the exporter as a
// daemon, Prometheus, etcd, helm, the pinned tools) is tests/framework. Everything it
// creates is undone in t.Cleanup, also when the test fails.
package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireRoot skips the test when not running as root, and under -short: `make test`
// runs the tests that need no root first, with -short -race, as a quick tier of its own.
func RequireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root; -short runs the unprivileged tests only")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates loop devices, mounts, cgroups")
	}
}

// RequireTools skips the test when a command is missing (make test installs them).
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (run `make test-deps` as root to install it)", tool)
		}
	}
}

// Run runs a command and fails the test with its output when it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// LoopDevice creates a sparse image of size bytes and attaches it to a free loop device.
// The device is detached in cleanup.
func LoopDevice(t testing.TB, size int64) string {
	t.Helper()
	return loopDeviceIn(t, t.TempDir(), size)
}

// RAMLoopExt4 is LoopExt4 with its image in /dev/shm (tmpfs): a real block device and a
// real ext4 whose flushes never reach this machine's own disk, for tests that judge the
// exporter's timing and must not mistake a stall of the shared host disk (a journal
// commit behind another test's writeback) for one of the exporter's.
func RAMLoopExt4(t testing.TB, size int64) (dev, dir string) {
	t.Helper()
	RequireRoot(t)
	shm, err := os.MkdirTemp("/dev/shm", "diskprobe-test-")
	if err != nil {
		t.Skipf("needs a writable /dev/shm for a RAM-backed loop device: %v", err)
	}
	// Registered first, so it runs after the device is unmounted and detached.
	t.Cleanup(func() { os.RemoveAll(shm) })
	dev = loopDeviceIn(t, shm, size)
	return dev, MountExt4(t, dev)
}

func loopDeviceIn(t testing.TB, imageDir string, size int64) string {
	t.Helper()
	RequireRoot(t)
	RequireTools(t, "losetup")
	img := filepath.Join(imageDir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev := Run(t, "losetup", "--find", "--show", "--direct-io=on", img)
	t.Cleanup(func() {
		// A busy device (still mounted by a failed test) is retried briefly.
		for i := 0; i < 20; i++ {
			if exec.Command("losetup", "-d", dev).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not detach %s", dev)
	})
	return dev
}

// MountExt4 makes an ext4 filesystem on dev and mounts it on a temporary directory,
// unmounted (after a thaw, in case a test froze it) in cleanup.
func MountExt4(t testing.TB, dev string) string {
	t.Helper()
	RequireTools(t, "mkfs.ext4", "mount", "umount")
	Run(t, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, "mount", "-t", "ext4", dev, dir)
	t.Cleanup(func() {
		exec.Command("fsfreeze", "-u", dir).Run()
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", dir).Run()
			t.Logf("umount %s: %v %s (lazy unmount done)", dir, err, out)
		}
	})
	return dir
}

// LoopExt4In is LoopExt4 with its image in dir (a FUSE mount, to make the device as
// slow as the mount's operations).
func LoopExt4In(t testing.TB, dir string, size int64) (dev, mnt string) {
	t.Helper()
	dev = loopDeviceIn(t, dir, size)
	return dev, MountExt4(t, dev)
}

// LoopExt4 is a loop device of size bytes with a mounted ext4 on it.
func LoopExt4(t testing.TB, size int64) (dev, dir string) {
	dev = LoopDevice(t, size)
	return dev, MountExt4(t, dev)
}

// Freeze runs fsfreeze -f on a mount point. Thaw undoes it; cleanup always thaws.
func Freeze(t testing.TB, dir string) (thaw func()) {
	t.Helper()
	RequireTools(t, "fsfreeze")
	Run(t, "fsfreeze", "-f", dir)
	var once sync.Once
	thaw = func() { once.Do(func() { exec.Command("fsfreeze", "-u", dir).Run() }) }
	t.Cleanup(thaw)
	return thaw
}

// Cgroup is a blkio cgroup v1 the test created.
type Cgroup struct {
	t    testing.TB
	root string // the hierarchy's root, where cleanup moves the processes back
	Path string
}

const blkioRoot = "/sys/fs/cgroup/blkio"

// ThrottleWrites creates a blkio cgroup limiting writes to dev to iops write operations
// per second: a loop device made as slow as a failing SSD. Processes moved in with Add
// are moved back out and the cgroup removed in cleanup.
func ThrottleWrites(t testing.TB, dev string, iops int) *Cgroup {
	t.Helper()
	return throttle(t, dev, "blkio.throttle.write_iops_device", int64(iops))
}

// ThrottleReads is ThrottleWrites for reads: a volume with a provisioned read IOPS cap.
func ThrottleReads(t testing.TB, dev string, iops int) *Cgroup {
	t.Helper()
	return throttle(t, dev, "blkio.throttle.read_iops_device", int64(iops))
}

// Exec is the command line that runs name with args inside the cgroup from its first
// instruction (a limit on a parent cgroup does not bind a child here, and moving a process
// in after it started lets its first I/Os through unlimited).
func (c *Cgroup) Exec(name string, args ...string) (string, []string) {
	script := fmt.Sprintf(`echo $$ > %s && exec "$@"`, filepath.Join(c.Path, "cgroup.procs"))
	return "sh", append([]string{"-c", script, "sh", name}, args...)
}

// ThrottleWriteBandwidth is ThrottleWrites with a cap of bytes per second instead: a
// device whose small writes pass at once while its bandwidth is free, and queue behind
// the bytes ahead of them (first in, first out within the cgroup) once something fills it.
func ThrottleWriteBandwidth(t testing.TB, dev string, bytesPerSecond int64) *Cgroup {
	t.Helper()
	return throttle(t, dev, "blkio.throttle.write_bps_device", bytesPerSecond)
}

// ThrottleReadBandwidth is a blkio cgroup limiting reads from dev to bytesPerSecond.
func ThrottleReadBandwidth(t testing.TB, dev string, bytesPerSecond int64) *Cgroup {
	t.Helper()
	return throttle(t, dev, "blkio.throttle.read_bps_device", bytesPerSecond)
}

func throttle(t testing.TB, dev, file string, limit int64) *Cgroup {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat(filepath.Join(blkioRoot, file)); err != nil {
		t.Skip("needs blkio cgroup v1 throttling at " + blkioRoot)
	}
	cg := newCgroup(t, blkioRoot)
	cg.Throttle(dev, file, limit)
	return cg
}

// Throttle sets (or changes) the cgroup's limit of file (blkio.throttle.write_iops_device,
// read_bps_device, ...) on dev: one cgroup can carry a limit per device.
func (c *Cgroup) Throttle(dev, file string, limit int64) {
	c.t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		c.t.Fatal(err)
	}
	rule := fmt.Sprintf("%d:%d %d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), limit)
	if err := os.WriteFile(filepath.Join(c.Path, file), []byte(rule), 0o644); err != nil {
		c.t.Fatalf("throttling %s: %v", dev, err)
	}
}

// BlkioCgroup creates an empty blkio cgroup (v1), with no limit: a place to put a process
// whose cgroup a test follows. Removed in cleanup, its processes moved back out.
func BlkioCgroup(t testing.TB) *Cgroup {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat(filepath.Join(blkioRoot, "tasks")); err != nil {
		t.Skip("needs the blkio cgroup v1 hierarchy at " + blkioRoot)
	}
	return newCgroup(t, blkioRoot)
}

// unifiedRoot is the cgroup v2 hierarchy of a hybrid host, which carries the PSI files
// (io.pressure, cpu.pressure) of each cgroup even with no controller enabled.
const unifiedRoot = "/sys/fs/cgroup/unified"

// UnifiedCgroup creates an empty cgroup in the hybrid host's cgroup v2 hierarchy: a
// process moved there has pressure files of its own. Removed in cleanup.
func UnifiedCgroup(t testing.TB) *Cgroup {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat(filepath.Join(unifiedRoot, "io.pressure")); err != nil {
		t.Skip("needs a cgroup v2 hierarchy with PSI at " + unifiedRoot)
	}
	return newCgroup(t, unifiedRoot)
}

// Name is the cgroup's path as /proc/PID/cgroup writes it: "/diskprobe-test-…".
func (c *Cgroup) Name() string { return strings.TrimPrefix(c.Path, c.root) }

// cpuRoot is the cgroup v1 cpu controller's hierarchy.
const cpuRoot = "/sys/fs/cgroup/cpu"

// CPUQuota makes a cpu cgroup (v1) whose processes together get at most quota of CPU time
// in every period (CFS bandwidth control, what a container's CPU limit sets): a process moved
// into it that wants more is throttled, runnable but off the CPUs, until the next period.
func CPUQuota(t testing.TB, quota, period time.Duration) *Cgroup {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat(filepath.Join(cpuRoot, "cpu.cfs_quota_us")); err != nil {
		t.Skip("needs the cgroup v1 cpu controller with CFS bandwidth control at " + cpuRoot)
	}
	cg := newCgroup(t, cpuRoot)
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}} {
		if err := os.WriteFile(filepath.Join(cg.Path, f.name), []byte(fmt.Sprint(f.v.Microseconds())), 0o644); err != nil {
			t.Fatalf("%s %v: %v", f.name, f.v, err)
		}
	}
	return cg
}

// newCgroup makes a cgroup of this test under root, removed in cleanup with its processes
// moved back to root.
func newCgroup(t testing.TB, root string) *Cgroup {
	removeStaleCgroups(root)
	cg := &Cgroup{t: t, root: root, Path: filepath.Join(root, fmt.Sprintf("diskprobe-test-%d-%d", os.Getpid(), rand.IntN(1<<30)))}
	if err := os.Mkdir(cg.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cg.remove)
	return cg
}

// removeStaleCgroups removes the cgroups under root that a test process killed outright (a
// CI run stopped with SIGKILL) left: named for a pid that is gone, and empty (rmdir fails on
// a cgroup that holds a process, so a live one is never touched).
func removeStaleCgroups(root string) {
	for _, d := range leftBehind(filepath.Join(root, "diskprobe-test-")) {
		_ = os.Remove(d)
	}
}

// leftBehind lists the paths prefix<pid>-<n> whose pid is not running: what a test process
// killed before its cleanup (a CI run stopped with SIGKILL) left. This process's own are never
// listed.
func leftBehind(prefix string) []string {
	paths, _ := filepath.Glob(prefix + "*-*")
	var gone []string
	for _, p := range paths {
		var pid, n int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p, prefix), "%d-%d", &pid, &n); err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			gone = append(gone, p)
		}
	}
	return gone
}

// Add moves a process (all its threads) into the cgroup.
func (c *Cgroup) Add(pid int) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.Path, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
		c.t.Fatalf("moving pid %d into %s: %v", pid, c.Path, err)
	}
}

func (c *Cgroup) remove() {
	data, _ := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	for _, pid := range strings.Fields(string(data)) {
		_ = os.WriteFile(filepath.Join(c.root, "cgroup.procs"), []byte(pid), 0o644) // an exited pid: nothing to move
	}
	for i := 0; i < 50; i++ {
		if err := os.Remove(c.Path); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("could not remove cgroup %s", c.Path)
}

var (
	buildOnce sync.Once
	binaryDir string
	binary    string
	buildErr  error
	mainRuns  bool
)

// Main runs a package's tests (run is m.Run, or a wrapper of it) and then removes the
// binary Binary built for them: one per test process, shared by all its tests, so no single
// test's cleanup may remove it. A package whose tests call Binary has a TestMain that calls
// Main; Binary fails the test otherwise, so that no run leaves a binary in the temporary
// directory.
func Main(run func() int) int {
	mainRuns = true
	code := run()
	if binaryDir != "" {
		_ = os.RemoveAll(binaryDir)
	}
	return code
}

// Binary builds the exporter once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	if !mainRuns {
		t.Fatal("testenv.Binary: the package's TestMain must run its tests through testenv.Main, which removes the binary afterwards")
	}
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		prefix := filepath.Join(os.TempDir(), "diskprobe-bin-")
		for _, d := range leftBehind(prefix) {
			_ = os.RemoveAll(d)
		}
		binaryDir, err = os.MkdirTemp("", fmt.Sprintf("diskprobe-bin-%d-", os.Getpid()))
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(binaryDir, "diskprobe_exporter")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/diskprobe_exporter")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// rootModule is the module line of the go.mod at the top of the checkout. The tests module
// (tests/) has a go.mod of its own below it, so the nearest go.mod is not enough.
const rootModule = "module github.com/diskprobe/diskprobe_exporter"

// RepoPath is elem joined onto the top of the checkout the test runs in: where the
// Makefile, the Containerfile and the data the tests check (alerts/, dashboards/, the chart,
// docs/) are, from either module. It looks up from the working directory, which go test
// sets to the package's own, for the daemon's go.mod, and panics outside a checkout: no
// test can run there.
func RepoPath(elem ...string) string {
	r, err := repoRoot()
	if err != nil {
		panic("testenv: " + err.Error())
	}
	return filepath.Join(append([]string{r}, elem...)...)
}

var repoRoot = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && slices.Contains(strings.Split(string(b), "\n"), rootModule) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod with %q in %s or above", rootModule, dir)
		}
	}
})

// SyncBuffer is a bytes.Buffer safe for a process to write while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// FirstHole is where SEEK_HOLE finds the first hole of the file at path, and its size:
// the two are equal when the file has no hole.
func FirstHole(t testing.TB, path string) (hole, size int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hole, err = unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return hole, fi.Size()
}

// BindMount bind-mounts src on dst (an existing directory), unmounted in cleanup.
func BindMount(t testing.TB, src, dst string) {
	t.Helper()
	Run(t, "mount", "--bind", src, dst)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dst).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", dst).Run()
			t.Logf("umount %s: %v %s (lazy unmount done)", dst, err, out)
		}
	})
}

// ProcessState is the state letter of /proc/PID/stat ("" when the process is gone): "Z"
// for a process that has exited but is not reaped yet, which is what a process whose
// thread is stuck in the kernel (frozen or hung filesystem) stays as until the I/O returns.
func ProcessState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// Process is a command a test runs whose exit is seen even when one of its threads is
// stuck in the kernel on a hung mount: the process then stays a zombie, holding its pipes
// open, until the I/O returns. Its output goes to a file, not a pipe.
type Process struct {
	Cmd     *exec.Cmd
	out     string
	reaped  chan struct{}
	waitErr error
}

// StartProcess starts name with args, its stdout and stderr into one file. It is killed
// in cleanup (and waited for, up to 10 s).
func StartProcess(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: exec.Command(name, args...), out: out.Name(), reaped: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = out, out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	go func() { p.waitErr = p.Cmd.Wait(); close(p.reaped) }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		select {
		case <-p.reaped:
		case <-time.After(10 * time.Second):
		}
	})
	return p
}

// WaitExit waits until the process has exited, reaped or a zombie, and reports whether it
// did within timeout.
func (p *Process) WaitExit(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.reaped:
			return true
		default:
			if ProcessState(p.Cmd.Process.Pid) == "Z" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// Output is what the process has written so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.out)
	return string(b)
}

// ExitCode waits up to timeout for the process to be reaped and returns its exit status
// (-1 when it was not reaped in time or did not exit normally).
func (p *Process) ExitCode(timeout time.Duration) int {
	select {
	case <-p.reaped:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Sleeper starts a long sleep under a name of its own (its /proc/PID/comm, as a vantage's
// `process` matches it), killed by its pid in cleanup.
func Sleeper(t testing.TB, name string) *exec.Cmd {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}
