package collector

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// BenchmarkSampleToHistogram is the path of every timed call's sample: the Env.Observe a
// probe's rounds get from newRunner, into the histogram of the sample's phase.
//
//	go test -run '^$' -bench 'SampleToHistogram|RoundObserved' -benchmem ./collector
func BenchmarkSampleToHistogram(b *testing.B) {
	for _, c := range []struct {
		kind   string
		phases []probe.Phase
	}{
		{"fsync", []probe.Phase{probe.PhaseWrite, probe.PhaseFdatasync}},
		{"randread", []probe.Phase{probe.PhaseRead}},
		{"commit", []probe.Phase{probe.PhaseCommit}},
	} {
		b.Run(c.kind, func(b *testing.B) {
			observe := productionObserver(NewMetrics(prometheus.NewRegistry()), c.kind, "t")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				observe(probe.Sample{Phase: c.phases[i%len(c.phases)], Duration: time.Duration(200_000 + i%1000)})
				i++
			}
		})
	}
}

// BenchmarkFsyncRoundObserved is the CPU of the fsync probe's operations (a write and its
// fdatasync, timed, both samples recorded as the daemon records them) on a memory
// filesystem, where fdatasync returns at once: what is left is the prober's own cost.
// One op is a round of 100 operations.
func BenchmarkFsyncRoundObserved(b *testing.B) {
	dir, err := os.MkdirTemp("/dev/shm", "bench-fsync-")
	if err != nil {
		b.Skip(err)
	}
	defer os.RemoveAll(dir)
	p, err := probe.NewFsync(probe.FsyncOptions{Dir: dir, Ops: 100, BlockSize: 2300, FileSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	env := &probe.Env{Budget: probe.Unlimited, Inflight: &probe.Inflight{}, Observe: productionObserver(NewMetrics(prometheus.NewRegistry()), "fsync", "t")}
	if _, err := p.Round(context.Background(), env); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Round(context.Background(), env); err != nil {
			b.Fatal(err)
		}
	}
}
