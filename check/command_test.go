package check_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// result is one run of the real `diskprobe_exporter check`.
type result struct {
	stdout, stderr string
	code           int
}

// runCheck runs the real binary with args and waits for it (killed by its own pid after
// timeout). The progress goes to stderr as plain lines: the test is not a terminal.
func runCheck(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	return runCommand(t, timeout, testenv.Binary(t), append([]string{"check"}, args...)...)
}

func runCommand(t *testing.T, timeout time.Duration, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("check did not finish within %v\nstdout:\n%s\nstderr:\n%s", timeout, r.stdout, r.stderr)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// decode parses the --json output, failing the test when stdout is not one JSON object.
func decode(t *testing.T, r result) map[string]any {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\nstdout:\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", r.stdout)
	}
	return doc
}

func field(doc map[string]any, path ...string) any {
	var cur any = doc
	for _, k := range path {
		m, _ := cur.(map[string]any)
		cur = m[k]
	}
	return cur
}

// assertNothingLeft fails when dir holds anything but what was there before (a fresh
// ext4's lost+found).
func assertNothingLeft(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "lost+found" {
			t.Errorf("check left %s behind in %s", e.Name(), dir)
		}
	}
}

func TestCheckPassesOnAFastDisk(t *testing.T) {
	testenv.RequireRoot(t) // the tests build and run the binary; root keeps them with the kernel ones
	// A RAM-backed loop device: a real block device and filesystem whose fdatasync takes
	// tens of microseconds, so a FAIL cannot come from a neighbour's I/O on the host's
	// disk (a fresh clone's make test saw three FAILs in a row there, p99 10.5-28 ms).
	// The CPU is still shared: on a host whose CPUs are taken, getting back onto one after
	// the syscall can take over 10 ms (the timed region includes it, as etcd's does).
	// PASS must come on one of three runs; every run must end in a verdict, never an error.
	_, dir := testenv.RAMLoopExt4(t, 128<<20) // the check wants its 4 MiB, then its 32 MiB commit file, plus a 64 MiB margin free
	var last result
	var p99s []any
	for attempt := 1; attempt <= 3; attempt++ {
		last = runCheck(t, 2*time.Minute, "--json", "--size=4MiB", "--commits=100", dir)
		assertNothingLeft(t, dir)
		doc := decode(t, last)
		p99 := field(doc, "probes", "fsync", "fdatasync_seconds", "p99")
		commitP99 := field(doc, "probes", "commit", "commit_seconds", "p99")
		p99s = append(p99s, p99, commitP99)
		t.Logf("attempt %d: exit %d, verdict %v, fdatasync p99 %vs, %v writes/s, commit p99 %vs (%v)", attempt, last.code, field(doc, "verdict"), p99,
			field(doc, "probes", "fsync", "writes_per_second"), commitP99, field(doc, "probes", "commit", "verdict"))
		if last.code == 0 {
			if field(doc, "verdict") != "PASS" {
				t.Fatalf("exit 0 with verdict %v", field(doc, "verdict"))
			}
			if ops := field(doc, "probes", "fsync", "ops"); ops != float64(4<<20/2300) {
				t.Errorf("fsync ops %v, want %d (fio's count for --size=4MiB --bs=2300)", ops, 4<<20/2300)
			}
			if ops := field(doc, "probes", "commit", "ops"); ops != float64(100) || field(doc, "probes", "commit", "verdict") != "PASS" || field(doc, "probes", "fsync", "verdict") != "PASS" {
				t.Errorf("commit ops %v, verdicts fsync %v commit %v; want 100 commits and both PASS", ops, field(doc, "probes", "fsync", "verdict"), field(doc, "probes", "commit", "verdict"))
			}
			return
		}
		if last.code != 1 || field(doc, "verdict") != "FAIL" {
			t.Fatalf("exit %d, want 0 (PASS) or 1 (FAIL)\nstdout:\n%s\nstderr:\n%s", last.code, last.stdout, last.stderr)
		}
		p, ok := p99.(float64)
		c, cok := commitP99.(float64)
		if !ok || !cok || p < field(doc, "threshold_seconds").(float64) && c < field(doc, "probes", "commit", "threshold_seconds").(float64) {
			t.Fatalf("FAIL on a RAM-backed disk with fdatasync p99 %v and commit p99 %v under their thresholds:\n%s", p99, commitP99, last.stdout)
		}
	}
	// Three FAILs, each from a p99 over 10 ms (or a commit's over 25 ms) on a device that answers in microseconds:
	// the host's CPUs were taken. That is the verdict the check owes such a host (etcd
	// would suffer the same); whether PASS is reached is judged again on the next run.
	t.Skipf("PASS path not reached: fdatasync p99 %v s in three runs on a RAM-backed disk, so the CPUs were taken", p99s)
}

// On a disk doing 20 writes a second, both of etcd's figures fail: a WAL fdatasync waits
// for its write, a commit for its ten scattered pages, its meta page and two flushes.
func TestCheckFailsOnDiskThrottledTo20WriteIOPS(t *testing.T) {
	dev, dir := testenv.LoopExt4(t, 256<<20)
	cg := testenv.ThrottleWrites(t, dev, 20)
	// The shell joins the cgroup, then becomes the check: every write it issues is throttled.
	r := runCommand(t, 4*time.Minute, "sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh",
		filepath.Join(cg.Path, "cgroup.procs"), testenv.Binary(t), "check", "--size=150KiB", "--commits=10", dir)
	t.Logf("stdout:\n%s", r.stdout)
	if r.code != 1 {
		t.Fatalf("exit %d on a disk doing 20 writes/s, want 1 (FAIL)\nstderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"FAIL  fdatasync p99 ", "FAIL  commit p99 ", "commit (etcd's backend commit): 10 commits of 10 x 4.0 KiB page writes",
		"writes/s is under the 50 sequential IOPS", "device:    " + filepath.Base(dev)} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	assertNothingLeft(t, dir)
}

func TestCheckRefusesWhatItCannotMeasure(t *testing.T) {
	testenv.RequireRoot(t)
	tmpfs := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(tmpfs, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", tmpfs)
	t.Cleanup(func() { exec.Command("umount", tmpfs).Run() })

	_, small := testenv.LoopExt4(t, 48<<20)
	nested := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(nested, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, readonly := testenv.LoopExt4(t, 128<<20)
	testenv.Run(t, "mount", "-o", "remount,ro", readonly)
	dev := testenv.LoopDevice(t, 32<<20)
	file := filepath.Join(t.TempDir(), "wal")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		dir  string
		want []string
	}{
		{"missing path", []string{"/nonexistent/etcd"}, "", []string{"check: /nonexistent/etcd does not exist"}},
		{"regular file", []string{file}, "", []string{file + " is neither a directory nor a block device"}},
		{"tmpfs", []string{tmpfs}, tmpfs, []string{"on tmpfs, which is memory, not a disk", "fdatasync on memory returns at once", "a healthy disk that does not exist"}},
		{"fsync on tmpfs", []string{"--probes=fsync", tmpfs}, tmpfs, []string{tmpfs + " is on tmpfs, which is memory, not a disk: fdatasync on memory returns at once"}},
		{"randread on tmpfs", []string{"--probes=randread", tmpfs}, tmpfs, []string{tmpfs + " is on tmpfs, which is memory, not a disk: O_DIRECT read probes cannot measure it"}},
		{"not enough free space", []string{small}, small, []string{"not enough free space on " + small, "the check needs 86.0 MiB"}},
		{"read-only filesystem", []string{readonly}, readonly, []string{"cannot create the check's scratch directory in " + readonly, "read-only file system"}},
		{"fsync on a block device", []string{"--probes=fsync", dev}, "", []string{dev + " is a block device", "nothing is ever written to a device"}},
		{"commit on a block device", []string{"--probes=commit", dev}, "", []string{dev + " is a block device: the commit probe writes", "nothing is ever written to a device"}},
		{"no commits", []string{"--commits=0", t.TempDir()}, "", []string{"--commits must be positive"}},
		{"unknown probe", []string{"--probes=fsync,seqwrite", t.TempDir()}, "", []string{`unknown probe "seqwrite"`}},
		{"bad size", []string{"--size=22MB", t.TempDir()}, "", []string{"--size: expected a size such as"}},
		{"probe dir on another filesystem", []string{"--probe-dir=" + small, t.TempDir()}, small, []string{"--probe-dir: " + small + " is on another filesystem"}},
		{"probe dir inside a path that is no filesystem root", []string{"--probe-dir=" + filepath.Join(nested, "inner"), nested}, "", []string{"is inside the measured path " + nested + ", which is not the root of its filesystem"}},
		{"probe dir the filesystem's lost+found", []string{"--probe-dir=" + filepath.Join(small, "lost+found"), small}, "", []string{"lost+found is the filesystem's own directory"}},
		{"probe dir for a block device", []string{"--probe-dir=" + t.TempDir(), dev}, "", []string{"--probe-dir: " + dev + " is a block device"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCheck(t, time.Minute, c.args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2 (error)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range c.want {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q does not say %q", r.stderr, want)
				}
			}
			if r.stdout != "" {
				t.Errorf("an error printed a summary on stdout:\n%s", r.stdout)
			}
			if c.dir != "" {
				assertNothingLeft(t, c.dir)
			}
		})
	}
}

// A usage error must not exit 1, the code of a FAIL verdict: a script would read a typo
// as a bad disk. kingpin's own errors (unknown flag, missing or extra argument, a value
// its parser refuses) exit 1 unless the command says otherwise.
func TestCheckUsageErrorsExit2NotTheFailVerdict(t *testing.T) {
	testenv.RequireRoot(t) // builds and runs the binary, as the other command tests
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"check", "--bogus", dir}, "unknown long flag '--bogus', try --help"},
		{"unknown flag before the command", []string{"--bogus", "check", dir}, "unknown long flag '--bogus', try --help"},
		{"no path", []string{"check"}, "required argument 'path' not provided, try --help"},
		{"two paths", []string{"check", dir, dir}, "unexpected " + dir + ", try --help"},
		{"bad profile", []string{"check", "--profile=bogus", dir}, `--profile "bogus": one of etcd, sweep, randrw`},
		{"bad duration", []string{"check", "--threshold=ten", dir}, "try --help"},
		{"bad number", []string{"check", "--profile=sweep", "--iodepth=x", dir}, "try --help"},
		{"bad boolean", []string{"check", "--json=maybe", dir}, "try --help"},
		{"unknown command", []string{"chekc", dir}, "try --help"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCommand(t, time.Minute, testenv.Binary(t), c.args...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
			}
			if r.stdout != "" {
				t.Errorf("a usage error printed on stdout:\n%s", r.stdout)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a usage error left %v in %s", entries, dir)
			}
		})
	}
}

func TestCheckJSONHasEveryDocumentedField(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	r := runCheck(t, 2*time.Minute, "--json", "--probes=fsync,commit,randread,seqread", "--size=1MiB", "--commits=20", "--duration=1s", dir)
	if r.code != 0 && r.code != 1 {
		t.Fatalf("exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	for _, path := range check.DocumentedJSONFields {
		if v := field(doc, path...); v == nil {
			t.Errorf("JSON has no %s", strings.Join(path, "."))
		}
	}
	if field(doc, "path") != dir {
		t.Errorf("path %v, want %s", field(doc, "path"), dir)
	}
	if n, _ := field(doc, "probes", "randread", "ops").(float64); n < 10 {
		t.Errorf("randread did %v reads in 1s", n)
	}
	if bps, _ := field(doc, "probes", "seqread", "bytes_per_second").(float64); bps <= 0 {
		t.Errorf("seqread bytes_per_second %v", bps)
	}
	lat := field(doc, "probes", "fsync", "fdatasync_seconds").(map[string]any)
	if !(lat["min"].(float64) <= lat["p50"].(float64) && lat["p50"].(float64) <= lat["p99"].(float64) && lat["p99"].(float64) <= lat["max"].(float64)) {
		t.Errorf("fdatasync percentiles out of order: %v", lat)
	}
	// The progress went to stderr, as plain lines: stderr is not a terminal here.
	for _, want := range []string{"fsync: done in", "commit: done in", "prepare: done in", "randread: done in", "seqread: done in"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress on stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "\r") {
		t.Errorf("progress redraws a bar although stderr is not a terminal: %q", r.stderr)
	}
	assertNothingLeft(t, dir)
}

func TestCheckOnBlockDeviceOnlyReads(t *testing.T) {
	dev := testenv.LoopDevice(t, 64<<20)
	before := testenv.Run(t, "sha256sum", dev)
	r := runCheck(t, time.Minute, "--json", "--duration=1s", "--probes=randread,seqread", dev)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 (no verdict)\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	if field(doc, "verdict") != "NONE" || field(doc, "probes", "fsync") != nil {
		t.Errorf("verdict %v, fsync %v on a block device; want NONE and no fsync", field(doc, "verdict"), field(doc, "probes", "fsync"))
	}
	if n, _ := field(doc, "probes", "randread", "ops").(float64); n < 10 {
		t.Errorf("randread did %v reads of %s in 1s", n, dev)
	}
	if after := testenv.Run(t, "sha256sum", dev); after != before {
		t.Errorf("the device changed under check: %s, then %s", before, after)
	}
}

func TestCheckLeavesNothingBehindAfterCtrlC(t *testing.T) {
	testenv.RequireRoot(t)
	cases := []struct {
		name string
		sig  syscall.Signal
		args []string
		file string // in the scratch directory's .diskprobe: once it exists, the run is under way
	}{
		// 2 GiB of 2300 B fdatasynced writes take minutes: the signal lands mid-run.
		{"SIGINT during fsync", syscall.SIGINT, []string{"--size=2GiB"}, "fsync.probe"},
		{"SIGTERM during fsync", syscall.SIGTERM, []string{"--size=2GiB"}, "fsync.probe"},
		// The read file is written, then read for a minute: the signal lands in either.
		{"SIGINT during the read probes", syscall.SIGINT, []string{"--probes=randread", "--duration=1m"}, "read.probe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(testenv.Binary(t), append(append([]string{"check"}, c.args...), dir)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-done
			})
			testenv.WaitFor(t, 30*time.Second, c.file, func() bool {
				found, _ := filepath.Glob(filepath.Join(dir, check.ScratchPrefix+"*", ".diskprobe", c.file))
				return len(found) == 1
			})
			time.Sleep(500 * time.Millisecond) // well into the I/O
			cmd.Process.Signal(c.sig)
			name := unix.SignalName(c.sig)
			select {
			case <-done:
				var exit *exec.ExitError
				if !errors.As(waitErr, &exit) || exit.ExitCode() != 2 {
					t.Errorf("exit %v after %s, want 2", waitErr, name)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("check still running 15s after %s", name)
			}
			if !strings.Contains(stderr.String(), "check: interrupted ("+name+")") {
				t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("an interrupted check printed a summary:\n%s", stdout.String())
			}
			assertNothingLeft(t, dir)
		})
	}
}

// An I/O stuck in the kernel (here a frozen filesystem) cannot be cancelled: Ctrl-C must
// still end the command in bounded time, exit 2, and name what it could not remove: in
// PATH, or with --probe-dir in the probe directory (PATH, etcd's data directory, holds
// nothing of the check's).
func TestCheckInterruptedWhileFilesystemFrozenExitsAndSaysWhatIsLeft(t *testing.T) {
	t.Run("in PATH", func(t *testing.T) { checkInterruptedWhileFrozen(t, false) })
	t.Run("with --probe-dir", func(t *testing.T) { checkInterruptedWhileFrozen(t, true) })
}

func checkInterruptedWhileFrozen(t *testing.T, withProbeDir bool) {
	_, fs := testenv.LoopExt4(t, 256<<20)
	path, dir := fs, fs // what check measures, where its files go
	args := []string{"check", "--size=100MiB"}
	if withProbeDir {
		path, dir = filepath.Join(fs, "etcd"), filepath.Join(fs, "diskprobe-etcd")
		for _, d := range []string{path, dir} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, "--probe-dir="+dir)
	}
	logs := t.TempDir()
	stdout, err := os.Create(filepath.Join(logs, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(logs, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	// Files, not pipes: the process cannot be reaped until the stuck I/O returns, and the
	// test must read what it said before thawing.
	cmd := exec.Command(testenv.Binary(t), append(args, path)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	var thaw func()
	t.Cleanup(func() {
		if thaw != nil {
			thaw()
		}
		cmd.Process.Kill()
		<-done
	})
	testenv.WaitFor(t, 30*time.Second, "the fsync probe file", func() bool {
		found, _ := filepath.Glob(filepath.Join(dir, check.ScratchPrefix+"*", ".diskprobe", "fsync.probe"))
		return len(found) == 1
	})
	thaw = testenv.Freeze(t, fs)
	time.Sleep(time.Second) // the next write blocks on the frozen filesystem
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	said := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	testenv.WaitFor(t, 20*time.Second, "check to give up on the stuck I/O", func() bool {
		return strings.Contains(said(), "check: interrupted by SIGINT, but an I/O is still stuck in the kernel")
	})
	t.Logf("gave up %v after SIGINT: %s", time.Since(start).Round(100*time.Millisecond), said())
	if !strings.Contains(said(), dir+"/"+check.ScratchPrefix+"*") {
		t.Errorf("the message does not name what may be left (%s/%s*): %s", dir, check.ScratchPrefix, said())
	}
	if withProbeDir && strings.Contains(said(), path+"/") {
		t.Errorf("the message sends the user into %s, which holds nothing of the check's: %s", path, said())
	}
	thaw()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("check did not exit after the thaw")
	}
	var exit *exec.ExitError
	if !errors.As(waitErr, &exit) || exit.ExitCode() != 2 {
		t.Errorf("exit %v, want 2", waitErr)
	}
	if out, _ := os.ReadFile(stdout.Name()); len(out) != 0 {
		t.Errorf("an interrupted check printed a summary:\n%s", out)
	}
}

func TestCheckWithProbeDirWritesNothingInThePath(t *testing.T) {
	testenv.RequireRoot(t)
	_, fs := testenv.LoopExt4(t, 256<<20)
	data, beside := filepath.Join(fs, "etcd"), filepath.Join(fs, "diskprobe-etcd")
	for _, d := range []string{data, beside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	r := runCheck(t, 2*time.Minute, "--json", "--size=2MiB", "--probe-dir="+beside, data)
	if r.code == 2 {
		t.Fatalf("no verdict (exit 2):\n%s", r.stderr)
	}
	if got := field(decode(t, r), "path"); got != data {
		t.Errorf("the report names %v, want the measured path %s", got, data)
	}
	for _, dir := range []string{data, beside} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			t.Errorf("%s holds %s after the check", dir, e.Name())
		}
	}
}

// TestCheckOnAHungPathNamesIt runs check on a FUSE mount that answers nothing (a hard NFS
// mount whose server is gone): check used to hang in its first stat. It exits 2 after a
// bounded wait naming the path; Ctrl-C meanwhile exits 2 at once. Its thread stuck in
// the stat keeps the exited process a zombie until the mount answers: the test watches
// /proc, and reads what it said from files, not pipes.
func TestCheckOnAHungPathNamesIt(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	h.Hang()
	for _, c := range []struct {
		name string
		sig  bool
		want string
	}{
		{"left alone", false, "check: " + h.Dir + " did not answer within 5s"},
		{"Ctrl-C", true, "check: interrupted (SIGINT)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testenv.StartProcess(t, testenv.Binary(t), "check", h.Dir)
			t.Cleanup(h.Release) // before StartProcess's cleanup waits for it
			start := time.Now()
			if c.sig {
				time.Sleep(time.Second)
				start = time.Now()
				p.Cmd.Process.Signal(syscall.SIGINT)
			}
			if !p.WaitExit(15 * time.Second) {
				t.Fatalf("check still running 15s later: %s", p.Output())
			}
			t.Logf("exited %s later: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(p.Output()))
			if !strings.Contains(p.Output(), c.want) {
				t.Errorf("stderr %q; want %q", p.Output(), c.want)
			}
			h.Release() // the stuck stat returns, the zombie is reaped
			if code := p.ExitCode(10 * time.Second); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			h.Hang()
		})
	}
}

// TestCheckOnAFilesystemWithoutFallocate: on a FUSE filesystem without fallocate (bindfs)
// check used to fail with `fallocate …: operation not supported`. It measures, with the
// files extended by ftruncate, and says so among its warnings.
func TestCheckOnAFilesystemWithoutFallocate(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	r := runCheck(t, 2*time.Minute, "--json", "--size=1MiB", "--probes=fsync,randread", "--duration=1s", h.Dir)
	if r.code == 2 {
		t.Fatalf("no verdict (exit 2):\n%s", r.stderr)
	}
	doc := decode(t, r)
	warnings, _ := doc["warnings"].([]any)
	found := 0
	for _, w := range warnings {
		if s, _ := w.(string); strings.Contains(s, "fallocate is not supported") {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d warnings about the missing fallocate, want 1: %v", found, warnings)
	}
	if p99 := field(doc, "probes", "fsync", "fdatasync_seconds", "p99"); p99 == nil {
		t.Errorf("no fdatasync p99 in the report")
	}
	assertNothingLeft(t, h.Dir)
}
