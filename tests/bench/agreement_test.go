package bench

import (
	"github.com/diskprobe/diskprobe_exporter/internal/latency"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// readFileSize is the data size of both read files, as in fio's recipe.
const readFileSize = 256 << 20

// interleave runs ours and fio's side once per round, alternating which goes first.
func interleave(t *testing.T, rounds int, ours, fio func() benchkit.Side) []benchkit.Round {
	t.Helper()
	var out []benchkit.Round
	for i := range rounds {
		rd := benchkit.Round{OursFirst: i%2 == 1}
		if rd.OursFirst {
			rd.Ours, rd.Fio = ours(), fio()
		} else {
			rd.Fio, rd.Ours = fio(), ours()
		}
		t.Logf("round %d: ours p50 %v p99 %v %.0f MiB/s | fio p50 %v p99 %v %.0f MiB/s", i+1,
			rd.Ours.P50, rd.Ours.P99, rd.Ours.Throughput/(1<<20), rd.Fio.P50, rd.Fio.P99, rd.Fio.Throughput/(1<<20))
		out = append(out, rd)
	}
	return out
}

func oursSide(t *testing.T, l benchkit.Loop, samples func(*benchkit.LoopResult) []time.Duration) benchkit.Side {
	t.Helper()
	r, err := benchkit.RunLoop(l)
	if err != nil {
		t.Fatal(err)
	}
	s := samples(r)
	sorted := latency.Sorted(s)
	side := benchkit.Side{Ops: r.Ops, P50: latency.Percentile(sorted, 50), P99: latency.Percentile(sorted, 99), CPU: r.User + r.Sys, CDF: benchkit.OursCDF(s)}
	if r.IO > 0 {
		side.Throughput = float64(r.Bytes) / r.IO.Seconds()
	}
	return side
}

func loopSpec(l benchkit.Loop) string {
	data, _ := json.Marshal(l)
	return string(data)
}

// fsyncCase is the etcd recipe: 2300-byte writes each followed by fdatasync.
func fsyncCase(t *testing.T, id, title, dir, cgroupProcs, size string, rounds int, notes ...string) *benchkit.Case {
	args := []string{"--name=fsync", "--directory=" + dir, "--unlink=1", "--rw=write", "--ioengine=sync", "--fdatasync=1", "--bs=2300", "--size=" + size}
	// Our side does as many operations as fio does.
	probeRun, err := benchkit.RunFio(t.TempDir(), cgroupProcs, args...)
	if err != nil {
		t.Fatal(err)
	}
	ops := probeRun.SyncN
	loop := benchkit.Loop{Kind: "fsync", Dir: dir, Ops: ops, BlockSize: 2300, FileSize: 64 << 20, Cgroup: cgroupProcs}
	c := &benchkit.Case{ID: id, Title: title, Where: "`" + dir + "`", FioCommand: probeRun.Command,
		Ours:  fmt.Sprintf("`probe.NewFsync` (the daemon's fsync probe, default file_size 64 MiB: header block, fallocate, fdatasync, then writes from offset 4096), one `benchkit.Round` of %d write+fdatasync pairs; fdatasync samples. benchkit.Loop spec `%s`", ops, loopSpec(loop)),
		Notes: append([]string{"each run starts from a new file (fio `--unlink=1`; ours recreates its file and removes it after the run); one unmeasured fio run first sizes our runs"}, notes...)}
	c.Rounds = interleave(t, rounds,
		func() benchkit.Side {
			return oursSide(t, loop, func(r *benchkit.LoopResult) []time.Duration { return r.Sync })
		},
		func() benchkit.Side {
			f, err := benchkit.RunFio(t.TempDir(), cgroupProcs, args...)
			if err != nil {
				t.Fatal(err)
			}
			return benchkit.Side{Ops: f.SyncN, P50: benchkit.Pct(f.Sync, 50), P99: benchkit.Pct(f.Sync, 99), CPU: f.User + f.Sys, CDF: benchkit.FioCDF(f.Sync)}
		})
	return c
}

// readFiles prepares our read probe file and lays out fio's, both 256 MiB, in dir.
func readFiles(t *testing.T, dir string) (fioFile string) {
	src, err := probe.NewReadFile(dir, readFileSize, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := benchkit.Prepare(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	t.Cleanup(func() { src.Remove() })
	fioFile = filepath.Join(dir, "fio-read.dat")
	if _, err := benchkit.RunFio(t.TempDir(), "", "--name=layout", "--filename="+fioFile, "--size=256m", "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync", "--create_only=1"); err != nil {
		t.Fatal(err)
	}
	return fioFile
}

func randreadCase(t *testing.T, dir, fioFile string, rounds int) *benchkit.Case {
	args := []string{"--name=randread", "--filename=" + fioFile, "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync", "--size=256m"}
	ops := readFileSize / 4096
	loop := benchkit.Loop{Kind: "randread", Dir: dir, Ops: ops, BlockSize: 4096, FileSize: readFileSize}
	c := &benchkit.Case{ID: "randread", Title: "(c) 4 KiB random read, O_DIRECT, QD1, 256 MiB prepared file", Where: "`" + dir + "`",
		FioCommand: "fio " + joinArgs(args),
		Ours:       fmt.Sprintf("`probe.NewReadFile` (256 MiB written once with random data, no holes) + `probe.NewRandread`, one `benchkit.Round` of %d reads (fio reads each block once, we read uniformly random blocks); read samples. benchkit.Loop spec `%s`", ops, loopSpec(loop)),
		Notes: []string{"fio's file was laid out once by fio (`--create_only=1`), ours prepared once by the probe package, both before the first round; O_DIRECT on both, so the page cache plays no part",
			"fio's figure is `clat` (completion latency of the psync engine: the pread system call)"}}
	c.Rounds = interleave(t, rounds,
		func() benchkit.Side {
			return oursSide(t, loop, func(r *benchkit.LoopResult) []time.Duration { return r.Read })
		},
		func() benchkit.Side { return fioReadSide(t, c, args) })
	return c
}

// fioReadSide runs fio's read job of a round (clat percentiles, and its bandwidth for
// the cases compared on throughput) and keeps the command it ran in the case.
func fioReadSide(t *testing.T, c *benchkit.Case, args []string) benchkit.Side {
	f, err := benchkit.RunFio(t.TempDir(), "", args...)
	if err != nil {
		t.Fatal(err)
	}
	c.FioCommand = f.Command
	return benchkit.Side{Ops: f.ReadIOs, P50: benchkit.Pct(f.Clat, 50), P99: benchkit.Pct(f.Clat, 99), Throughput: f.ReadBW, CPU: f.User + f.Sys, CDF: benchkit.FioCDF(f.Clat)}
}

func seqreadCase(t *testing.T, dir, fioFile string, rounds int) *benchkit.Case {
	args := []string{"--name=seqread", "--filename=" + fioFile, "--rw=read", "--bs=1m", "--direct=1", "--ioengine=psync", "--size=256m"}
	loop := benchkit.Loop{Kind: "seqread", Dir: dir, Ops: readFileSize >> 20, Bytes: readFileSize, BlockSize: 1 << 20, FileSize: readFileSize}
	c := &benchkit.Case{ID: "seqread", Title: "(d) 1 MiB sequential read, O_DIRECT", Where: "`" + dir + "`", Throughput: true,
		FioCommand: "fio " + joinArgs(args),
		Ours:       fmt.Sprintf("`probe.NewSeqread` on the prepared 256 MiB file, one `benchkit.Round` of 256 MiB (from a random block, wrapping); throughput is bytes over the time inside the reads, as the daemon reports it. benchkit.Loop spec `%s`", loopSpec(loop)),
		Notes: []string{"fio's figure is `bw_bytes` (bytes over the job's runtime); the plot compares the latency of each 1 MiB read (ours) with fio's clat percentiles",
			"on this virtual disk whole runs of either tool come out at about 0.9 GB/s or at about 1.5 GB/s (the host's doing; see the plot), so a round where only one side had the fast run gives a ratio near 0.6 or 1.7: hence 25 rounds and the median of the ratios"}}
	c.Rounds = interleave(t, rounds,
		func() benchkit.Side {
			return oursSide(t, loop, func(r *benchkit.LoopResult) []time.Duration { return r.Read })
		},
		func() benchkit.Side { return fioReadSide(t, c, args) })
	return c
}

// throttledCase is the fsync case on a loop device limited to 20 write IOPS by a blkio
// cgroup that both our run and fio's join: a failing SSD.
func throttledCase(t *testing.T, rounds int) *benchkit.Case {
	dev, mnt := testenv.LoopExt4(t, 512<<20)
	cg := testenv.ThrottleWrites(t, dev, 20)
	c := fsyncCase(t, "fsync-throttled", "(b) fdatasync, 2300 B writes, loop device throttled to 20 write IOPS", mnt,
		filepath.Join(cg.Path, "cgroup.procs"), "150k", rounds,
		fmt.Sprintf("ext4 on %s (512 MiB sparse image, `losetup --direct-io=on`), blkio cgroup v1 `blkio.throttle.write_iops_device` = 20 on it; fio and our process join the cgroup before any I/O", dev),
		"an fdatasync here takes about 100 ms: about two throttled requests each (the data write and the cache flush) at 20 per second; with 66 operations p99 (nearest rank) is the slowest of them, for fio as for us")
	c.Where = fmt.Sprintf("`%s` (ext4 on %s, throttled)", mnt, dev)
	return c
}

func joinArgs(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

// cpuFigure is CPU per 10,000 operations over the rounds of c.
func cpuFigure(what string, c *benchkit.Case) *benchkit.CPUFigure {
	f := &benchkit.CPUFigure{What: what, Case: c}
	var o, r, ratio []float64
	for _, rd := range c.Rounds {
		ov := time.Duration(float64(rd.Ours.CPU) * 10000 / float64(rd.Ours.Ops))
		fv := time.Duration(float64(rd.Fio.CPU) * 10000 / float64(rd.Fio.Ops))
		f.OursRounds, f.FioRounds = append(f.OursRounds, ov), append(f.FioRounds, fv)
		o, r, ratio = append(o, float64(ov)), append(r, float64(fv)), append(ratio, float64(ov)/float64(fv))
	}
	f.Ours, f.Fio, f.Ratio = time.Duration(benchkit.Median(o)), time.Duration(benchkit.Median(r)), benchkit.Median(ratio)
	return f
}
