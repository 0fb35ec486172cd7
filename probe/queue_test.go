package probe

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

func TestQueueJobRefusesToWriteABlockDevice(t *testing.T) {
	dev := testenv.LoopDevice(t, 16<<20)
	src, err := OpenDevice(dev, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, err = RunQueue(context.Background(), src, QueueJob{BlockSize: 4096, Depth: 4, Random: true, ReadMix: 99, Runtime: time.Second}, &Env{Budget: Unlimited})
	if !errors.Is(err, ErrBlockDeviceWrite) {
		t.Fatalf("a job with writes on %s: %v, want ErrBlockDeviceWrite", dev, err)
	}
}

// Both mechanisms, AIO and the threads it falls back to where io_setup is refused, keep
// writes inside the probe file's data: its header, which says the file is ours, survives.
func TestQueueJobWritesNeverReachTheProbeFileHeader(t *testing.T) {
	_, dir := testenv.LoopExt4(t, 64<<20)
	src := kernelPrepare(t, dir, 8<<20)
	header := func() string {
		b, err := os.ReadFile(src.Path())
		if err != nil {
			t.Fatal(err)
		}
		return string(b[:HeaderSize])
	}
	before := header()
	for _, mech := range []string{"", MechanismThreads} {
		for _, random := range []bool{true, false} {
			res, err := RunQueue(context.Background(), src, QueueJob{BlockSize: 4096, Depth: 8, Random: random, ReadMix: 0, Runtime: 200 * time.Millisecond, Mechanism: mech}, &Env{Budget: Unlimited})
			if err != nil {
				t.Fatalf("%q random=%v: %v", mech, random, err)
			}
			if res.Write.Ops < 8 || res.Read.Ops != 0 || len(res.Write.Lat) != res.Write.Ops {
				t.Errorf("%s random=%v: %d writes, %d reads, %d samples", res.Mechanism, random, res.Write.Ops, res.Read.Ops, len(res.Write.Lat))
			}
			want := MechanismAIO
			if mech != "" {
				want = mech
			}
			if res.Mechanism != want {
				t.Errorf("mechanism %q, want %q", res.Mechanism, want)
			}
		}
	}
	if after := header(); after != before {
		t.Errorf("the probe file's header changed:\n%q\n%q", before, after)
	}
}

// A cancelled job (Ctrl-C in check) stops starting I/O at once and returns what is in
// flight, not after its runtime.
func TestQueueJobStopsWhenCancelled(t *testing.T) {
	_, dir := testenv.LoopExt4(t, 64<<20)
	src := kernelPrepare(t, dir, 8<<20)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := RunQueue(ctx, src, QueueJob{BlockSize: 4096, Depth: 16, Random: true, ReadMix: 100, Runtime: time.Minute}, &Env{Budget: Unlimited})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled job returned %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a cancelled 1-minute job took %v to return", took)
	}
}
