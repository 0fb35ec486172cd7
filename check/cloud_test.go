package check_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// ceilingOf runs a sweep with args and returns the JSON's ceiling (nil: none) and the run.
func ceilingOf(t *testing.T, name string, args ...string) (map[string]any, result) {
	t.Helper()
	start := time.Now()
	r := runCommand(t, 3*time.Minute, name, args...)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	c, _ := doc["ceiling"].(map[string]any)
	t.Logf("ceiling %v in %s", c, time.Since(start).Round(time.Second))
	return c, r
}

// randrw runs a randrw job with args and returns its JSON.
func randrw(t *testing.T, name string, args ...string) map[string]any {
	t.Helper()
	r := runCommand(t, 3*time.Minute, name, args...)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	t.Logf("randrw: flat %v, queue gain %v", doc["flat"], doc["queue_gain"])
	return doc
}

// TestSweepNamesAThrottledCeiling: a loop device under blkio throttle.read_iops_device,
// check itself in the cgroup carrying the limit, is named capped within 10 % of the limit;
// the same device unthrottled, and a FUSE filesystem slow on every read, are not. randrw
// calls the throttled device flat (IOPS did not grow from its depth-1 reference), not the others.
func TestSweepNamesAThrottledCeiling(t *testing.T) {
	testenv.RequireRoot(t)
	const limit = 200
	// 64 KiB: sizes up to 64 KiB, 32 cells. 700 ms cells keep the throttle's 100 ms slices
	// from showing (300 ms cells read 146–182 against 200).
	dev := testenv.LoopDevice(t, 64<<10)
	testenv.FillRandom(t, dev, 64<<10)
	bin := testenv.Binary(t)
	t.Run("throttled", func(t *testing.T) {
		cg := testenv.ThrottleReads(t, dev, limit)
		name, args := cg.Exec(bin, "check", "--profile=sweep", "--json", "--no-progress", "--runtime=700ms", dev)
		c, _ := ceilingOf(t, name, args...)
		iops, _ := c["iops"].(float64)
		if math.Abs(iops-limit) > 0.1*limit || c["from_iodepth"] != 1.0 {
			t.Errorf("ceiling %v, want ~%d IOPS from queue depth 1", c, limit)
		}
		// randrw, reads only on a device: flat from its depth-1 reference.
		name, args = cg.Exec(bin, "check", "--profile=randrw", "--json", "--no-progress", "--rwmixread=100", "--bs=4KiB", "--runtime=2s", dev)
		if doc := randrw(t, name, args...); doc["flat"] != true {
			t.Errorf("randrw under a throttle: flat %v, queue gain %v; want flat", doc["flat"], doc["queue_gain"])
		}
	})
	t.Run("unthrottled", func(t *testing.T) {
		if c, r := ceilingOf(t, bin, "check", "--profile=sweep", "--json", "--no-progress", "--runtime=100ms", dev); c != nil {
			t.Errorf("an unthrottled loop device named capped: %v\n%s", c, r.stdout)
		}
		// randrw on a device of 16 MiB: on the 64 KiB one, served from the host's cache,
		// depth 32 once gained only 1.49× (randrw's FLAT is no ceiling: docs/check.md).
		big := testenv.LoopDevice(t, 16<<20)
		testenv.FillRandom(t, big, 16<<20)
		if doc := randrw(t, bin, "check", "--profile=randrw", "--json", "--no-progress", "--rwmixread=100", "--bs=4KiB", "--runtime=1s", big); doc["flat"] != false {
			t.Errorf("randrw called an unthrottled loop device flat: queue gain %v", doc["queue_gain"])
		}
	})
	t.Run("slow FUSE", func(t *testing.T) {
		h := testenv.MountHangFS(t, testenv.HangFSOptions{ReadDelay: 2 * time.Millisecond})
		c, r := ceilingOf(t, bin, "check", "--profile=sweep", "--json", "--no-progress", "--runtime=100ms", "--iodepth=8", "--file-size=1MiB", h.Dir)
		if c != nil {
			t.Errorf("a slow FUSE filesystem named capped: %v\n%s", c, r.stdout)
		}
		if doc := randrw(t, bin, "check", "--profile=randrw", "--json", "--no-progress", "--rwmixread=100", "--bs=4KiB", "--runtime=1s", "--iodepth=8", "--file-size=1MiB", h.Dir); doc["flat"] != false {
			t.Errorf("randrw called a slow FUSE filesystem flat: queue gain %v", doc["queue_gain"])
		}
		assertNothingLeft(t, h.Dir)
	})
}

// TestFirstWriteSeesTheRampAndItsEnd: on a FUSE filesystem whose first write to each
// 4 KiB block is slow and later ones fast, first-write reports the penalty, IOPS that
// climb once every block of its file has been written, and warmed up; its file is gone.
func TestFirstWriteSeesTheRampAndItsEnd(t *testing.T) {
	testenv.RequireRoot(t)
	h := testenv.MountHangFS(t, testenv.HangFSOptions{FirstWriteDelay: 3 * time.Millisecond})
	start := time.Now()
	// 2 MiB: 512 first writes of ≥ 3 ms between as many rewrites, about 2 s of ramp.
	r := runCheck(t, 3*time.Minute, "--profile=first-write", "--json", "--no-progress", "--file-size=2MiB", "--interval=1s", "--runtime=2m", h.Dir)
	t.Logf("first-write took %s", time.Since(start).Round(time.Second))
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	doc := decode(t, r)
	assertDocumented(t, doc, check.DocumentedFirstWriteJSONFields)
	// go-fuse passes O_DIRECT through: no fdatasync fallback on the fixture.
	if field(doc, "direct_io") != true {
		t.Errorf("direct_io %v on the FUSE fixture, want true", field(doc, "direct_io"))
	}
	if got := h.FirstWrites(); got < 512 {
		t.Errorf("the filesystem saw %d first writes, want the file's 512 blocks", got)
	}
	if field(doc, "verdict") != check.WarmedUp || field(doc, "blocks_written") != 512.0 {
		t.Fatalf("verdict %v with %v blocks written, want %s with 512\n%s", field(doc, "verdict"), field(doc, "blocks_written"), check.WarmedUp, r.stdout)
	}
	// The penalty: 3 ms on top of a rewrite's fraction of a millisecond.
	if p, _ := field(doc, "first_write_penalty").(float64); p < 0.5 {
		t.Errorf("first_write_penalty %v, want the fixture's (> 0.5)", p)
	}
	// The ramp: the first interval (half first writes) against the stable level.
	ivs, _ := doc["intervals"].([]any)
	first, _ := ivs[0].(map[string]any)["iops"].(float64)
	stable, _ := field(doc, "stable_iops").(float64)
	at, _ := field(doc, "warmed_up_after_seconds").(float64)
	t.Logf("IOPS %.0f at first, stable at %.0f from %.1fs", first, stable, at)
	if stable < 2*first {
		t.Errorf("stable IOPS %.0f not above twice the first interval's %.0f: no ramp seen", stable, first)
	}
	if at <= 0 {
		t.Errorf("warmed up after %v s: the ramp's end is after its start", at)
	}
	assertNothingLeft(t, h.Dir)
	r = runCheck(t, 3*time.Minute, "--profile=first-write", "--no-progress", "--file-size=1MiB", "--interval=300ms", "--runtime=600ms", h.Dir)
	for _, want := range []string{"WARMING UP", "take the etcd verdict (--profile=etcd) only after warm-up"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("a bound too short for the ramp: exit %d, summary lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
	assertNothingLeft(t, h.Dir)
}

func TestFirstWriteNeverWritesABlockDevice(t *testing.T) {
	testenv.RequireRoot(t)
	dev := testenv.LoopDevice(t, 4<<20)
	testenv.FillRandom(t, dev, 4<<20)
	before := testenv.Run(t, "sha256sum", dev)
	r := runCheck(t, time.Minute, "--profile=first-write", "--runtime=1s", "--interval=500ms", dev)
	if r.code != 2 || !strings.Contains(r.stderr, dev+" is a block device and first-write writes: nothing is ever written to a block device") {
		t.Errorf("exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}
	if after := testenv.Run(t, "sha256sum", dev); after != before {
		t.Errorf("the device changed: %s, then %s", before, after)
	}
}
