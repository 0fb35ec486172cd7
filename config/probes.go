package config

import (
	"fmt"
	"time"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Probe kinds, as they appear in the config and in the `probe` label.
const (
	ProbeFsync    = "fsync"
	ProbeRandread = "randread"
	ProbeSeqread  = "seqread"
	ProbeSeqwrite = "seqwrite"
	ProbeCommit   = "commit"
)

// ProbeKind is the config side of a probe kind: its key, what it does to a target and the
// fields it takes, with its defaults. Parsing, validation and Resolve read it; the collector
// builds and records each kind from its own file (collector/probe_<name>.go).
type ProbeKind struct {
	Name string
	// Writes: refused on block devices (the exporter never writes to a device).
	Writes bool
	// ReadsSource: reads the target's shared read source, the whole device or the read probe
	// file that the worker prepares before the first read.
	ReadsSource bool
	// DirectIO: opens with O_DIRECT, so the path's filesystem must take it and block_size
	// must be a multiple of the device's logical block size.
	DirectIO bool
	// DefaultOn are the target kinds that get this probe when the target names none.
	DefaultOn []Kind
	// Defaults are the values of the fields a present key leaves out. The kind takes
	// exactly the fields whose default is not zero: the rule, and every default's value,
	// are in defaults.go.
	Defaults ProbeConfig
	// Check, when set, checks the fields against each other: the field it names
	// (e.g. "block_size") and the message, or "" when they agree.
	Check func(c *ProbeConfig) (field, msg string)
}

// ProbeKinds are the probe kinds in scheduling order. A new kind is one entry here (its
// defaults in defaults.go), one file in probe/ (its I/O) and one in collector/ (how it is
// built and what it records).
var ProbeKinds = []*ProbeKind{
	{
		// The etcd-WAL-like probe: sequential writes, each followed by fdatasync.
		Name: ProbeFsync, Writes: true, DefaultOn: onDirectories, Defaults: defaultFsync,
		Check: func(c *ProbeConfig) (string, string) {
			if c.FileSize < probe.HeaderSize+c.BlockSize {
				return "file_size", fmt.Sprintf("must hold the %s header and at least one block_size (%s), got %s", FormatSize(probe.HeaderSize), FormatSize(c.BlockSize), FormatSize(c.FileSize))
			}
			return "", ""
		},
	},
	{
		// O_DIRECT random reads of block_size at queue depth 1.
		Name: ProbeRandread, ReadsSource: true, DirectIO: true, DefaultOn: onEveryKind, Defaults: defaultRandread,
		Check: func(c *ProbeConfig) (string, string) {
			if c.BlockSize > c.FileSize {
				return "block_size", fmt.Sprintf("must not exceed file_size (%s), got %s", FormatSize(c.FileSize), FormatSize(c.BlockSize))
			}
			return "", ""
		},
	},
	{
		Name: ProbeSeqread, ReadsSource: true, DirectIO: true, DefaultOn: onEveryKind, Defaults: defaultSeqread,
		Check: blockWithinBytes,
	},
	{
		Name: ProbeSeqwrite, Writes: true, DirectIO: true, Defaults: defaultSeqwrite,
		Check: blockWithinBytes,
	},
	{
		// etcd's backend commit: scattered page writes, fdatasync, meta page, fdatasync.
		Name: ProbeCommit, Writes: true, Defaults: defaultCommit,
		Check: func(c *ProbeConfig) (string, string) {
			if c.Pages > MaxCommitPages {
				return "pages", fmt.Sprintf("must be at most %d, got %d", MaxCommitPages, c.Pages)
			}
			// The header and two meta pages, then the data pages, of at most 64 KiB each
			// (bbolt's page size is the machine's, os.Getpagesize(): 4 KiB on x86-64,
			// up to 64 KiB on arm64 and ppc64le kernels).
			if need := 3*commitMaxPage + int64(c.Pages)*commitMaxPage; c.FileSize < need {
				return "file_size", fmt.Sprintf("must hold the header, two meta pages and %d pages of up to %s each (%s), got %s",
					c.Pages, FormatSize(commitMaxPage), FormatSize(need), FormatSize(c.FileSize))
			}
			return "", ""
		},
	},
}

// MaxCommitPages is the most pages a commit of the commit probe may write: its buffers
// hold them all.
const MaxCommitPages = 1024

// commitMaxPage is the largest page size a machine may give bbolt.
const commitMaxPage = 64 * KiB

// ProbeConfig is one probe's settings; a kind uses the fields its Defaults set.
type ProbeConfig struct {
	Interval  time.Duration
	Ops       int
	Bytes     int64
	BlockSize int64
	FileSize  int64
	Pages     int // the commit probe's pages per commit
}

func blockWithinBytes(c *ProbeConfig) (string, string) {
	if c.BlockSize > c.Bytes {
		return "block_size", fmt.Sprintf("must not exceed bytes (%s), got %s", FormatSize(c.Bytes), FormatSize(c.BlockSize))
	}
	return "", ""
}

// LookupProbe is the kind named name, or nil.
func LookupProbe(name string) *ProbeKind {
	for _, k := range ProbeKinds {
		if k.Name == name {
			return k
		}
	}
	return nil
}
