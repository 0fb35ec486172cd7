package probe

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/latency"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// These tests need root and a real kernel: the read probe file on a loop-mounted ext4.

// kernelPrepare opens the read probe file of dir and prepares it with no rate limit.
func kernelPrepare(t *testing.T, dir string, size int64) *ReadSource {
	t.Helper()
	src, err := NewReadFile(dir, size, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	if err := src.Prepare(context.Background(), &Env{Budget: Unlimited}, nil); err != nil {
		t.Fatalf("preparing %s: %v", src.Path(), err)
	}
	return src
}

// kernelFileState is what tells a rewritten probe file from the one prepared before.
type kernelFileState struct {
	ino    uint64
	mtime  unix.Timespec
	size   int64
	hole   int64 // first hole per SEEK_HOLE; size if none
	header Header
}

func kernelState(t *testing.T, path string) kernelFileState {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	hole, err := unix.Seek(fd, 0, unix.SEEK_HOLE)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, HeaderSize)
	if _, err := unix.Pread(fd, b, 0); err != nil {
		t.Fatal(err)
	}
	h, ok := parseHeader(b)
	if !ok {
		t.Fatalf("%s lost its header", path)
	}
	return kernelFileState{ino: st.Ino, mtime: st.Mtim, size: st.Size, hole: hole, header: h}
}

func TestReadProbeFileReusedOnlyWhenPreparedWholeAndOfTheSameSize(t *testing.T) {
	_, mnt := testenv.LoopExt4(t, 64<<20)
	const size = 4 << 20
	for _, c := range []struct {
		name    string
		spoil   func(t *testing.T, path string) // what happened to the file between two runs
		newSize int64
		reuse   bool
	}{
		{name: "untouched", newSize: size, reuse: true},
		{name: "configured size changed", newSize: 2 * size},
		{name: "preparation interrupted", newSize: size, spoil: func(t *testing.T, path string) {
			// A run stopped before it marked the file prepared leaves this header.
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(Header{File: "read", Size: HeaderSize + size}.encode(), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hole punched", newSize: size, spoil: func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1<<20, 64<<10); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(mnt, c.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			first := kernelPrepare(t, dir, size)
			path := first.Path()
			first.Close()
			before := kernelState(t, path)
			if before.hole != before.size || before.size != HeaderSize+size || !before.header.Prepared {
				t.Fatalf("freshly prepared file: %+v; want %d bytes, no hole, header prepared", before, HeaderSize+size)
			}
			if c.spoil != nil {
				c.spoil(t, path)
				before = kernelState(t, path)
			}
			time.Sleep(10 * time.Millisecond) // a rewrite must show in the mtime

			second := kernelPrepare(t, dir, c.newSize)
			after := kernelState(t, path)
			if second.Reused() != c.reuse {
				t.Errorf("Reused() = %v, want %v", second.Reused(), c.reuse)
			}
			if c.reuse {
				if after.ino != before.ino || after.mtime != before.mtime {
					t.Errorf("a prepared file of the right size was rewritten: inode %d → %d, mtime %v → %v", before.ino, after.ino, before.mtime, after.mtime)
				}
			} else if after.ino == before.ino && after.mtime == before.mtime {
				t.Errorf("the file was taken as it was (inode %d, mtime %v) although it is %s", after.ino, after.mtime, c.name)
			}
			if after.size != HeaderSize+c.newSize || after.hole != after.size || !after.header.Prepared || after.header.Size != after.size {
				t.Errorf("after the second run: size %d (want %d), first hole at %d, header %+v", after.size, HeaderSize+c.newSize, after.hole, after.header)
			}
			rr, err := NewRandread(second, 8, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer rr.Close()
			if res, err := rr.Round(context.Background(), &Env{Budget: Unlimited}); err != nil || res.Ops != 8 {
				t.Errorf("randread on the second run's file: %+v, %v", res, err)
			}
		})
	}
}

// TestCompareReadProbesWithFio measures randread p50/p99 and seqread throughput on the
// same prepared file as fio's psync randread and sequential read, run side by side. It is
// a measurement, not a check: DISKPROBE_COMPARE=1 runs it (DISKPROBE_COMPARE_DIR picks the
// directory; default a temporary one on the filesystem holding $TMPDIR).
func TestCompareReadProbesWithFio(t *testing.T) {
	if os.Getenv("DISKPROBE_COMPARE") != "1" {
		t.Skip("a measurement for the issue notes; DISKPROBE_COMPARE=1 runs it")
	}
	testenv.RequireTools(t, "fio")
	dir := os.Getenv("DISKPROBE_COMPARE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	const runtime = 10 * time.Second
	src := kernelPrepare(t, dir, 256<<20)
	t.Cleanup(func() { src.Remove() })
	file := src.Path()

	for pass := 1; pass <= 2; pass++ {
		d := ourRandread(t, src, runtime)
		fioLat := fioRun(t, file, runtime, "--rw=randread", "--bs=4k")
		t.Logf("pass %d randread 4k QD1: diskprobe %d reads p50 %v p99 %v | fio psync clat %d reads p50 %v p99 %v",
			pass, len(d), latency.Percentile(d, 50), latency.Percentile(d, 99), fioLat.Read.TotalIOs,
			time.Duration(fioLat.Read.ClatNs.Percentile["50.000000"]), time.Duration(fioLat.Read.ClatNs.Percentile["99.000000"]))

		inIO, wall := ourSeqread(t, src, runtime)
		fioBW := fioRun(t, file, runtime, "--rw=read", "--bs=1m")
		t.Logf("pass %d seqread 1m QD1: diskprobe %.1f MB/s (bytes over time in the reads; %.1f MB/s over wall time) | fio %.1f MB/s",
			pass, inIO/1e6, wall/1e6, float64(fioBW.Read.BwBytes)/1e6)
	}
}

func ourRandread(t *testing.T, src *ReadSource, runtime time.Duration) []time.Duration {
	rr, err := NewRandread(src, 1000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	var d []time.Duration
	env := &Env{Budget: Unlimited, Observe: func(s Sample) { d = append(d, s.Duration) }}
	for start := time.Now(); time.Since(start) < runtime; {
		if _, err := rr.Round(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(d)
	return d
}

// ourSeqread returns bytes/s over the time inside the reads (what the exporter exports)
// and over wall time.
func ourSeqread(t *testing.T, src *ReadSource, runtime time.Duration) (inIO, wall float64) {
	sr, err := NewSeqread(src, 64<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	var bytes int64
	var io time.Duration
	start := time.Now()
	for time.Since(start) < runtime {
		res, err := sr.Round(context.Background(), &Env{Budget: Unlimited})
		if err != nil {
			t.Fatal(err)
		}
		bytes += res.Bytes
		io += res.IO
	}
	return float64(bytes) / io.Seconds(), float64(bytes) / time.Since(start).Seconds()
}

type fioJob struct {
	Read struct {
		TotalIOs int64 `json:"total_ios"`
		BwBytes  int64 `json:"bw_bytes"`
		ClatNs   struct {
			Percentile map[string]int64 `json:"percentile"`
		} `json:"clat_ns"`
	} `json:"read"`
}

func fioRun(t *testing.T, file string, runtime time.Duration, args ...string) fioJob {
	t.Helper()
	cmd := exec.Command("fio", append([]string{"--name=cmp", "--filename=" + file, "--direct=1", "--ioengine=psync",
		"--runtime=" + runtime.String(), "--time_based", "--output-format=json"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	var r struct{ Jobs []fioJob }
	if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio output: %v\n%s", err, out)
	}
	return r.Jobs[0]
}
