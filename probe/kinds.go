package probe

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Kind is a probe kind as the rest of the exporter knows it, declared once, in the kind's
// own file, beside its I/O (each file's init registers its Kind). config/ parses a
// target's probes from Kinds: the keys, their defaults, the cross-field checks, which
// target types run it when a target names none, and what it needs of a target (writes,
// the shared read source, O_DIRECT). collector/ builds it (New), sizes the target's budget
// for its largest operation, makes one latency histogram per phase it observes and adds
// its rounds' throughput to the sequential metrics. Nothing else names a kind.
type Kind struct {
	// Name is the kind's key in a target and its `probe` label.
	Name string
	// Order places the kind in scheduling order, which is also the order --config.check
	// and the reference list probes in: fsync 10, randread 20, seqread 30, seqwrite 40,
	// commit 50. A new kind takes a number of its own.
	Order int
	// Keys are the configuration keys the kind takes, each the key of a field of
	// Settings (SettingKeys); any other key under the kind is an unknown field.
	Keys []string
	// Defaults are the values of the fields a key leaves out; each field Keys names
	// needs one greater than zero (every probe field must be).
	Defaults Settings
	// DefaultOn are the target types that run the kind when a target names no probes.
	DefaultOn TargetTypes
	// Writes: the kind writes to the disk; refused on block devices (the exporter never
	// writes to a device) and checked against limits.min_free.
	Writes bool
	// ReadsSource: the kind reads the target's shared read source, the whole device or
	// the read probe file (Site.Reads), which its rounds fill before the first read.
	ReadsSource bool
	// DirectIO: the kind opens with O_DIRECT, so the path's filesystem must take it and
	// block_size must be a multiple of the device's logical block size.
	DirectIO bool
	// LargestBlock is the largest operation the kind makes with s, in bytes: the target's
	// bytes budget must let it through at once. The shared read file's filling is the
	// source's, not the kind's (FillBlock).
	LargestBlock func(s Settings) int64
	// Check, when set, checks the fields against each other: the key it names (e.g.
	// "block_size") and the message, or "" when they agree.
	Check func(s *Settings) (key, msg string)
	// Histograms are the latency histograms of the phases the kind observes, one per
	// phase: a Sample of another phase is not recorded by the daemon.
	Histograms []Histogram
	// Throughput, when set, is the direction ("read", "write") under which the kind's
	// successful rounds add their bytes and time inside the I/O calls to the sequential
	// metrics.
	Throughput string
	// New builds the kind's prober on a target from the narrow value it needs.
	New func(site Site, s Settings) (Prober, error)
}

// Settings are one probe's configured values; a kind uses the fields its Keys name.
type Settings struct {
	Interval  time.Duration
	Ops       int
	Bytes     int64
	BlockSize int64
	FileSize  int64
	Pages     int // the commit probe's pages per commit
}

// SettingKeys are the configuration keys of Settings' fields, in the order of the fields.
// A kind that needs a value no kind has yet adds a field to Settings and its key here,
// and config/parse.go's probeFields learns to read it.
var SettingKeys = []string{"interval", "ops", "bytes", "block_size", "file_size", "pages"}

// Site is what a kind's prober is built on: the target, as narrow as a kind needs it.
type Site struct {
	Dir     string      // where the probe files go: <Dir>/.diskprobe (a directory target's path or probe_dir)
	MinFree int64       // limits.min_free, bytes; 0 disables the floor
	Align   int64       // the device's logical block size, the O_DIRECT alignment until statx tells; 0 when unknown
	Reads   *ReadSource // the shared read source, for a kind that ReadsSource; its owner closes it
}

// TargetTypes are target types, as a set: the ones a probe kind runs on by default.
type TargetTypes uint8

// The target types.
const (
	OnDirectories TargetTypes = 1 << iota
	OnBlockDevices
)

// Histogram is the latency histogram of one phase of a kind: diskprobe_<Name>, by target.
type Histogram struct {
	Phase Phase
	Name  string // without the diskprobe_ namespace
	Help  string
	// Buckets are its classic bucket edges (LatencyBuckets, or edges of its own); nil
	// gives a histogram of native buckets only.
	Buckets []float64
}

// LatencyBuckets are the classic bucket edges of the fdatasync and read histograms (the
// commit histogram has CommitBuckets): the edges a rule, a panel or a verdict decides on,
// each exact rather than interpolated: etcd's 10 ms (wal_fsync p99) and 25 ms (backend_commit p99) targets, the
// etcd-mixin's 0.5 s and 1 s alerts, 100 ms (etcd's default heartbeat), 2.5 ms and 5 ms on
// the way to 10 ms (the suspect-hardware alert's floors), and 100 µs and 1 ms, which tell
// NVMe from SATA from spinning disks. etcd's own buckets start at 1 ms and cannot see an
// SSD. Every edge costs a series per target and per histogram, and a Prometheus with 64
// targets to scrape spends more on those series than on anything else (BENCHMARKS.md); the
// native buckets (factor 1.1) carry the full resolution to a Prometheus that ingests them.
// A kind whose histogram needs other edges gives its own (Histogram.Buckets).
var LatencyBuckets = []float64{100e-6, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1}

// CommitBuckets are the commit histogram's: LatencyBuckets and 250 ms, the etcd-mixin's
// etcdHighCommitDurations line (backend commit p99 over 0.25 s), so that its page counts the
// commits over it instead of interpolating inside the 100-500 ms bucket.
var CommitBuckets = []float64{100e-6, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.25, 0.5, 1}

// blockSize is the LargestBlock of a kind whose every operation is one block_size.
func blockSize(s Settings) int64 { return s.BlockSize }

var kinds []*Kind

// register adds a kind to Kinds; each kind's file calls it from its init. A kind that
// could not work (no constructor, a key Settings has not, a default missing, a name or
// order already taken) stops the program at start, before any configuration is read.
func register(k *Kind) {
	switch {
	case k.Name == "" || k.New == nil || k.LargestBlock == nil:
		panic(fmt.Sprintf("probe: kind %q needs a name, New and LargestBlock", k.Name))
	case k.Writes && k.DefaultOn&OnBlockDevices != 0:
		panic(fmt.Sprintf("probe: kind %q writes and cannot run on block devices by default", k.Name))
	}
	for _, key := range k.Keys {
		if !slices.Contains(SettingKeys, key) {
			panic(fmt.Sprintf("probe: kind %q takes %q, which is not a key of Settings (SettingKeys)", k.Name, key))
		}
		if v, _ := k.Defaults.Value(key); v <= 0 {
			panic(fmt.Sprintf("probe: kind %q has no default for %q", k.Name, key))
		}
	}
	for _, o := range kinds {
		if o.Name == k.Name || o.Order == k.Order {
			panic(fmt.Sprintf("probe: kinds %q and %q share a name or an order", o.Name, k.Name))
		}
	}
	kinds = append(kinds, k)
	slices.SortFunc(kinds, func(a, b *Kind) int { return cmp.Compare(a.Order, b.Order) })
}

// Kinds are the probe kinds, in scheduling order. The slice is the package's: read it only.
func Kinds() []*Kind { return kinds }

// LookupKind is the kind named name, or nil.
func LookupKind(name string) *Kind {
	for _, k := range kinds {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Takes says whether the kind takes the configuration key key.
func (k *Kind) Takes(key string) bool { return slices.Contains(k.Keys, key) }

// Value is the field of s whose key is key, as a number (a duration in nanoseconds), and
// whether there is such a key.
func (s Settings) Value(key string) (int64, bool) {
	switch key {
	case "interval":
		return int64(s.Interval), true
	case "ops":
		return int64(s.Ops), true
	case "bytes":
		return s.Bytes, true
	case "block_size":
		return s.BlockSize, true
	case "file_size":
		return s.FileSize, true
	case "pages":
		return int64(s.Pages), true
	}
	return 0, false
}

// Has says whether t holds every target type of o.
func (t TargetTypes) Has(o TargetTypes) bool { return t&o == o }
