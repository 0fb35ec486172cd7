package check_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// assertDocumented fails for every documented field the JSON lacks; a path through
// "cells" is looked up in every cell.
func assertDocumented(t *testing.T, doc map[string]any, fields [][]string) {
	t.Helper()
	for _, path := range fields {
		if path[0] == "cells" || path[0] == "intervals" {
			cells, _ := doc[path[0]].([]any)
			if len(cells) == 0 {
				t.Errorf("JSON has no cells")
				continue
			}
			for i, c := range cells {
				if _, ok := c.(map[string]any)[path[1]]; !ok {
					t.Errorf("cell %d has no %s", i, path[1])
				}
			}
			continue
		}
		if !hasField(doc, path...) {
			t.Errorf("JSON has no %s", strings.Join(path, "."))
		}
	}
}

// hasField: the path is in doc, or leads through a key that is present and null (the
// sweep's ceiling when it shows none).
func hasField(doc map[string]any, path ...string) bool {
	cur := doc
	for _, k := range path {
		v, ok := cur[k]
		if !ok {
			return false
		}
		if v == nil {
			return true
		}
		if cur, ok = v.(map[string]any); !ok {
			return true
		}
	}
	return true
}

func TestSweepOfABlockDeviceReadsEveryCellAndWritesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	dev := testenv.LoopDevice(t, 64<<20)
	testenv.FillRandom(t, dev, 64<<20)
	before := testenv.Run(t, "sha256sum", dev)
	r := runCheck(t, 2*time.Minute, "--profile=sweep", "--json", "--runtime=40ms", "--iodepth=8", dev)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	if after := testenv.Run(t, "sha256sum", dev); after != before {
		t.Errorf("the device changed under the sweep: %s, then %s", before, after)
	}
	doc := decode(t, r)
	assertDocumented(t, doc, check.DocumentedSweepJSONFields)
	if field(doc, "profile") != "sweep" || field(doc, "source", "kind") != "device" {
		t.Errorf("profile %v, source %v; want sweep of the device", field(doc, "profile"), field(doc, "source"))
	}
	// 512 B to 64 MiB is 18 sizes; random and sequential; depth 1 and 8.
	cells, _ := doc["cells"].([]any)
	if len(cells) != 18*2*2 {
		t.Fatalf("%d cells, want 72", len(cells))
	}
	first, last := cells[0].(map[string]any), cells[len(cells)-1].(map[string]any)
	if first["block_size_bytes"] != 512.0 || last["block_size_bytes"] != float64(64<<20) || last["iodepth"] != 8.0 || last["pattern"] != "sequential" {
		t.Errorf("cells from %v to %v; want 512 B random QD1 to 64 MiB sequential QD8", first, last)
	}
	for _, c := range cells {
		c := c.(map[string]any)
		if c["ops"].(float64) < 1 || c["iops"].(float64) <= 0 || c["p50_seconds"].(float64) <= 0 || c["p99_seconds"].(float64) < c["p50_seconds"].(float64) {
			t.Errorf("cell without a measurement: %v", c)
		}
	}
	if adv := field(doc, "advertised_seconds"); adv != 72*0.04 {
		t.Errorf("advertised_seconds %v, want 72 cells × 40ms", adv)
	}
	if !strings.Contains(r.stderr, "sweep: 72 cells of 40ms") {
		t.Errorf("the sweep did not say up front how long it takes:\n%s", r.stderr)
	}
}

// dirsToMeasure are a loop-mounted ext4 and a directory on this machine's own disk.
func dirsToMeasure(t *testing.T) map[string]string {
	_, loop := testenv.LoopExt4(t, 256<<20)
	return map[string]string{"loop ext4": loop, "this machine's disk": t.TempDir()}
}

func TestSweepOfADirectoryReadsItsOwnFileAndRemovesIt(t *testing.T) {
	testenv.RequireRoot(t)
	for name, dir := range dirsToMeasure(t) {
		t.Run(name, func(t *testing.T) {
			r := runCheck(t, 2*time.Minute, "--profile=sweep", "--runtime=20ms", "--iodepth=4", "--file-size=16MiB", dir)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{"random read", "sequential read", "QD1 IO/s", "QD4 IO/s", "16 MiB", "a 16.0 MiB file of its own"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("summary lacks %q:\n%s", want, r.stdout)
				}
			}
			// The file holds 16 MiB: the sweep stops at that block size.
			if strings.Contains(r.stdout, "32 MiB") {
				t.Errorf("the sweep read blocks larger than its file:\n%s", r.stdout)
			}
			assertNothingLeft(t, dir)
		})
	}
}

func TestRandRWWritesOnlyItsOwnFileAndReportsBothSides(t *testing.T) {
	testenv.RequireRoot(t)
	for name, dir := range dirsToMeasure(t) {
		t.Run(name, func(t *testing.T) {
			r := runCheck(t, 2*time.Minute, "--profile=randrw", "--json", "--runtime=1s", "--iodepth=4", "--bs=16KiB", "--rwmixread=70", "--file-size=32MiB", dir)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
			}
			doc := decode(t, r)
			assertDocumented(t, doc, check.DocumentedRandRWJSONFields)
			reads, _ := field(doc, "read", "ops").(float64)
			writes, _ := field(doc, "write", "ops").(float64)
			if reads == 0 || writes == 0 {
				t.Fatalf("reads %v, writes %v; want both", reads, writes)
			}
			// 70 % reads, within what a second of random choices allows.
			if share := reads / (reads + writes); share < 0.6 || share > 0.8 {
				t.Errorf("read share %.2f with --rwmixread=70", share)
			}
			if field(doc, "block_size_bytes") != 16384.0 || field(doc, "iodepth") != 4.0 || field(doc, "source", "kind") != "file" {
				t.Errorf("job %v %v %v", field(doc, "block_size_bytes"), field(doc, "iodepth"), field(doc, "source"))
			}
			assertNothingLeft(t, dir)
		})
	}
}

func TestRandRWNeverWritesABlockDevice(t *testing.T) {
	testenv.RequireRoot(t)
	dev := testenv.LoopDevice(t, 32<<20)
	testenv.FillRandom(t, dev, 32<<20)
	before := testenv.Run(t, "sha256sum", dev)
	r := runCheck(t, time.Minute, "--profile=randrw", "--runtime=1s", dev)
	if r.code != 2 || !strings.Contains(r.stderr, dev+" is a block device and randrw writes: nothing is ever written to a block device") ||
		!strings.Contains(r.stderr, "--rwmixread=100") {
		t.Errorf("exit %d, stderr %q; want a refusal that names --rwmixread=100", r.code, r.stderr)
	}
	r = runCheck(t, time.Minute, "--profile=randrw", "--json", "--runtime=500ms", "--rwmixread=100", "--bs=4KiB", dev)
	if r.code != 0 {
		t.Fatalf("read-only randrw: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	if n, _ := field(doc, "read", "ops").(float64); n < 10 || field(doc, "write", "ops") != 0.0 {
		t.Errorf("read-only randrw did %v reads and %v writes", n, field(doc, "write", "ops"))
	}
	if after := testenv.Run(t, "sha256sum", dev); after != before {
		t.Errorf("the device changed under randrw: %s, then %s", before, after)
	}
}

func TestProfileFlagsAreRefusedByName(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--profile=sweep", "--threshold=5ms", dir}, "--threshold does not apply to --profile=sweep"},
		{[]string{"--profile=sweep", "--bs=4KiB", dir}, "--bs does not apply to --profile=sweep"},
		{[]string{"--iodepth=8", dir}, "--iodepth does not apply to --profile=etcd"},
		{[]string{"--profile=randrw", "--probes=fsync", dir}, "--probes does not apply to --profile=randrw"},
		{[]string{"--profile=sweep", "--iodepth=0", dir}, "--iodepth 0: between 1 and 256"},
		{[]string{"--profile=randrw", "--iodepth=1000", dir}, "--iodepth 1000: between 1 and 256"},
		{[]string{"--profile=sweep", "--runtime=-1s", dir}, "--runtime -1s: must be positive"},
		{[]string{"--profile=randrw", "--rwmixread=101", dir}, "--rwmixread 101: a percentage"},
		{[]string{"--profile=randrw", "--bs=1000", dir}, "--bs 1000: a multiple of 512 B"},
		{[]string{"--profile=randrw", "--bs=4KB", dir}, "--bs: expected a size such as"},
		{[]string{"--profile=sweep", "--file-size=1000", dir}, "--file-size 1000: a whole number of MiB"},
		{[]string{"--profile=randrw", "--bs=64MiB", "--file-size=32MiB", dir}, "--bs 67108864 is larger than --file-size 33554432"},
		{[]string{"--profile=sweep", "--interval=1s", dir}, "--interval does not apply to --profile=sweep"},
		{[]string{"--profile=first-write", "--iodepth=4", dir}, "--iodepth does not apply to --profile=first-write"},
		{[]string{"--profile=first-write", "--interval=0s", dir}, "--interval 0s: positive, at most --runtime (5m0s)"},
		{[]string{"--profile=first-write", "--runtime=10s", "--interval=20s", dir}, "--interval 20s: positive, at most --runtime (10s)"},
		{[]string{"--profile=first-write", "--bs=1000", dir}, "--bs 1000: a multiple of 512 B"},
		{[]string{"--profile=first-write", "--file-size=1000", dir}, "--file-size 1000: a whole number of MiB"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[:len(c.args)-1], " "), func(t *testing.T) {
			r := runCheck(t, time.Minute, c.args...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, c.want)
			}
			assertNothingLeft(t, dir)
		})
	}
	r := runCheck(t, time.Minute, "--profile=bogus", dir)
	if r.code != 2 || !strings.Contains(r.stderr, `--profile "bogus": one of etcd, sweep, randrw, first-write`) {
		t.Errorf("--profile=bogus: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestProfilesLeaveNothingBehindAfterCtrlC(t *testing.T) {
	testenv.RequireRoot(t)
	// Each profile's line that says its jobs run: the signal lands in them.
	running := map[string]string{"sweep": "prepare: done", "randrw": "prepare: done", "first-write": "first-write: 4 KiB writes into"}
	for _, profile := range []string{"sweep", "randrw", "first-write"} {
		t.Run(profile, func(t *testing.T) {
			_, dir := testenv.LoopExt4(t, 256<<20)
			cmd := exec.Command(testenv.Binary(t), "check", "--profile="+profile, "--runtime=1m", "--file-size=64MiB", dir)
			var stdout bytes.Buffer
			var stderr testenv.SyncBuffer // read while the command writes it
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
			// Once the file is prepared, the jobs run for a minute: the signal lands in them.
			testenv.WaitFor(t, 30*time.Second, "the first job", func() bool {
				return strings.Contains(stderr.String(), running[profile])
			})
			time.Sleep(300 * time.Millisecond)
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-done:
				var exit *exec.ExitError
				if !errors.As(waitErr, &exit) || exit.ExitCode() != 2 {
					t.Errorf("exit %v after SIGINT, want 2", waitErr)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("check still running 15s after SIGINT")
			}
			if !strings.Contains(stderr.String(), "check: interrupted (SIGINT)") {
				t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("an interrupted check printed a summary:\n%s", stdout.String())
			}
			assertNothingLeft(t, dir)
			if left, _ := filepath.Glob(filepath.Join(dir, check.ScratchPrefix+"*")); len(left) > 0 {
				t.Errorf("left %v", left)
			}
		})
	}
}
