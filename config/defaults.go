package config

import (
	"slices"
	"time"
)

// Every default of the configuration is in this file: docs/configuration.md lists each
// one (its test compares the table with these values). They are applied before any check,
// as blackbox_exporter's UnmarshalYAML starts a module from DefaultModule and lets the
// file's keys overwrite it: the parser starts a target's limits from DefaultLimits and a
// probe's fields from its kind's defaults, then reads the keys; the probes of a target
// that names none are probesFor's, which the parser checks for both kinds of target before
// the disk is asked. So a default meets every check a value written in the file meets.

// DefaultLimits are a target's limits; each key under `limits` replaces its field.
var DefaultLimits = Limits{IOPS: 200, Bandwidth: 50 * MiB, Timeout: 30 * time.Second, MinFree: 1 * GiB}

// The fields of a probe whose key leaves them out (ProbeKind.Defaults).
//
// A kind takes exactly the fields whose default is not zero: every probe field must be
// greater than zero, so a field a kind takes needs a default for a key that leaves it out,
// and a zero marks a field the kind has no use for (seqread reads the read probe file but
// does not size it: no file_size). parser.probeFields applies the rule; the reference's
// key table follows it too.
var (
	defaultFsync    = ProbeConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 2300, FileSize: 64 * MiB}
	defaultRandread = ProbeConfig{Interval: 15 * time.Second, Ops: 20, BlockSize: 4 * KiB, FileSize: defaultReadFileSize}
	defaultSeqread  = ProbeConfig{Interval: 10 * time.Minute, Bytes: 64 * MiB, BlockSize: 1 * MiB}
	defaultSeqwrite = ProbeConfig{Interval: time.Hour, Bytes: 64 * MiB, BlockSize: 1 * MiB}
	// The commit probe's: 10 commits a round (as many as etcd's backend makes in a second
	// at its 100 ms batch interval), 10 pages each (the mean of 9.5 page writes per commit
	// of a measured etcd under a Kubernetes-like load) scattered over a 128 MiB file (a
	// cluster of some thousand objects; 24 MiB measured for 3000 pod-sized ones, and
	// etcd's quota is 2 GiB). docs/design.md#the-commit-probe has the measurement.
	defaultCommit = ProbeConfig{Interval: 15 * time.Second, Ops: 10, Pages: 10, FileSize: 128 * MiB}
)

// The kinds of target that run a probe when the target names none (ProbeKind.DefaultOn):
// a directory fsync, randread and seqread; a block device randread and seqread. seqwrite
// and commit are opt-in.
var (
	onDirectories = []Kind{KindDirectory}
	onEveryKind   = []Kind{KindDirectory, KindBlockDevice}
)

// defaultReadFileSize is the size of the read probe file: randread's default file_size,
// and the size when no probe that reads the file sets one (seqread takes none).
const defaultReadFileSize = 256 * MiB

// Default is the configuration of a probe of kind name as an empty key gives it.
func Default(name string) ProbeConfig { return LookupProbe(name).Defaults }

// probesFor is the one place a target's probes are decided: those its file names, each
// with its kind's defaults for the fields left out (filled in by the parser), or, when it
// names none, the default probes of a target of that kind. The parser checks what this
// returns for every kind a target may turn out to be, before the disk is asked, so a
// default probe meets the same checks as a named one.
func (t *Target) probesFor(kind Kind) map[string]*ProbeConfig {
	probes := map[string]*ProbeConfig{}
	for _, k := range ProbeKinds {
		switch {
		case len(t.Probe) > 0 && t.Probe[k.Name] != nil:
			probes[k.Name] = t.Probe[k.Name]
		case len(t.Probe) == 0 && slices.Contains(k.DefaultOn, kind):
			c := k.Defaults
			probes[k.Name] = &c
		}
	}
	return probes
}

// applyKindDefaults sets the probes the target runs as a target of that kind (see
// probesFor). It makes a new map: t may be a copy sharing its map with the parsed target.
func (t *Target) applyKindDefaults(kind Kind) {
	t.Probe = t.probesFor(kind)
}
