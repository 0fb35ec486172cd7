package collector

import (
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// builders make each probe kind from a target's config. Adding a kind is one file in
// probe/ and one entry here.
var builders = map[string]func(r *runner) (probe.Prober, error){
	config.ProbeFsync: func(r *runner) (probe.Prober, error) {
		c := r.target.Fsync
		return probe.NewFsync(probe.FsyncOptions{Dir: r.target.ProbeRoot(), Ops: c.Ops, BlockSize: int(c.BlockSize),
			FileSize: c.FileSize, MinFree: r.target.Limits.MinFree})
	},
	config.ProbeRandread: func(r *runner) (probe.Prober, error) {
		src, err := r.readSource()
		if err != nil {
			return nil, err
		}
		return probe.NewRandread(src, r.target.Randread.Ops, int(r.target.Randread.BlockSize))
	},
	config.ProbeSeqread: func(r *runner) (probe.Prober, error) {
		src, err := r.readSource()
		if err != nil {
			return nil, err
		}
		return probe.NewSeqread(src, r.target.Seqread.Bytes, int(r.target.Seqread.BlockSize))
	},
	config.ProbeSeqwrite: func(r *runner) (probe.Prober, error) {
		c := r.target.Seqwrite
		return probe.NewSeqwrite(r.target.ProbeRoot(), c.Bytes, int(c.BlockSize), r.target.Limits.MinFree, r.fallbackAlign())
	},
}

func (r *runner) fallbackAlign() int64 {
	if r.devOK {
		return r.dev.LogicalBlockSize
	}
	return 0
}

// readSource opens what the read probes of the target share: the whole device, or the
// probe file, which the worker then prepares in steps before the first read.
func (r *runner) readSource() (*probe.ReadSource, error) {
	if r.source != nil {
		return r.source, nil
	}
	var (
		src *probe.ReadSource
		err error
	)
	if r.target.Kind == config.KindBlockDevice {
		src, err = probe.OpenDevice(r.target.Path, r.fallbackAlign())
	} else {
		size := config.DefaultRandread.FileSize
		if r.target.Randread != nil {
			size = r.target.Randread.FileSize
		}
		src, err = probe.NewProbeFile(r.target.ProbeRoot(), size, r.target.Limits.MinFree, r.fallbackAlign())
	}
	if err != nil {
		return nil, err
	}
	r.source = src
	return src, nil
}
