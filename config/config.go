// Package config reads and validates the diskprobe_exporter configuration file.
//
// The YAML is walked node by node rather than unmarshalled into structs, so that every
// error can name the file, the line and the field (`diskprobe.yml:4: targets[0]: unknown
// field "fsyncc"`) and unknown keys are always errors.
package config

import (
	"fmt"
	"time"
)

// Kind is what a target's path is. The values are the `kind` label of diskprobe_target_info.
type Kind string

// The kinds of target: a directory holds probe files; a block device is only read.
const (
	KindDirectory   Kind = "directory"
	KindBlockDevice Kind = "blockdev"
)

// Probe kinds, as they appear in the config and in the `probe` label.
const (
	ProbeFsync    = "fsync"
	ProbeRandread = "randread"
	ProbeSeqread  = "seqread"
	ProbeSeqwrite = "seqwrite"
)

// Config is a whole configuration file.
type Config struct {
	File    string
	Targets []Target
}

// Target is one directory or block device to probe.
type Target struct {
	Name string
	Path string // absolute, cleaned
	// ProbeDir, when set, holds the probe files (in its .diskprobe/) instead of Path, which
	// is then only stat'ed: a directory of the exporter's own beside another program's data
	// directory, on the same filesystem. Absolute, cleaned.
	ProbeDir string
	Kind     Kind // set by Resolve, from the path on disk
	Line     int  // line of the target in the file, for errors found after parsing

	Fsync    *FsyncConfig
	Randread *RandreadConfig
	Seqread  *SequentialConfig
	Seqwrite *SequentialConfig
	Limits   Limits
}

// FsyncConfig is the etcd-WAL-like probe: sequential writes, each followed by fdatasync.
type FsyncConfig struct {
	Interval  time.Duration
	Ops       int
	BlockSize int64
	FileSize  int64
}

// RandreadConfig is the 4 KiB O_DIRECT random read probe.
type RandreadConfig struct {
	Interval  time.Duration
	Ops       int
	BlockSize int64
	FileSize  int64
}

// SequentialConfig is the seqread and seqwrite throughput probes.
type SequentialConfig struct {
	Interval  time.Duration
	Bytes     int64
	BlockSize int64
}

// Limits are the hard caps on what the prober may cost a target.
type Limits struct {
	IOPS      float64
	Bandwidth int64 // bytes per second
	Timeout   time.Duration
	MinFree   int64 // bytes; 0 disables the floor
}

// Binary size units, as the config's sizes take them.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// Defaults, as DESIGN.md gives them. A probe key that is present takes these for the
// fields it leaves out.
var (
	DefaultFsync    = FsyncConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 2300, FileSize: 64 * MiB}
	DefaultRandread = RandreadConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 4 * KiB, FileSize: 256 * MiB}
	DefaultSeqread  = SequentialConfig{Interval: 10 * time.Minute, Bytes: 64 * MiB, BlockSize: 1 * MiB}
	DefaultSeqwrite = SequentialConfig{Interval: time.Hour, Bytes: 64 * MiB, BlockSize: 1 * MiB}
	DefaultLimits   = Limits{IOPS: 200, Bandwidth: 50 * MiB, Timeout: 30 * time.Second, MinFree: 1 * GiB}
)

// MaxBlockSize bounds the buffers a probe allocates.
const MaxBlockSize = 64 * MiB

// ProbeRoot is the directory whose .diskprobe/ holds the target's probe files: probe_dir
// when set, else the path itself.
func (t *Target) ProbeRoot() string {
	if t.ProbeDir != "" {
		return t.ProbeDir
	}
	return t.Path
}

// Probes returns the names of the probes enabled on the target, in scheduling order.
func (t *Target) Probes() []string {
	var out []string
	if t.Fsync != nil {
		out = append(out, ProbeFsync)
	}
	if t.Randread != nil {
		out = append(out, ProbeRandread)
	}
	if t.Seqread != nil {
		out = append(out, ProbeSeqread)
	}
	if t.Seqwrite != nil {
		out = append(out, ProbeSeqwrite)
	}
	return out
}

// Interval returns the round interval of an enabled probe.
func (t *Target) Interval(probe string) time.Duration {
	switch probe {
	case ProbeFsync:
		return t.Fsync.Interval
	case ProbeRandread:
		return t.Randread.Interval
	case ProbeSeqread:
		return t.Seqread.Interval
	case ProbeSeqwrite:
		return t.Seqwrite.Interval
	}
	panic(fmt.Sprintf("unknown probe %q", probe))
}

// Summary is the one line `--config.check` prints.
func (c *Config) Summary() string {
	probes := 0
	s := ""
	for i, t := range c.Targets {
		probes += len(t.Probes())
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (%s %s: %v", t.Name, t.Kind, t.Path, t.Probes())
		if t.ProbeDir != "" {
			s += ", probe files in " + t.ProbeDir
		}
		s += ")"
	}
	return fmt.Sprintf("%s: %d targets, %d probes: %s", c.File, len(c.Targets), probes, s)
}
