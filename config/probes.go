package config

import (
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Probe kinds, as they appear in the config and in the `probe` label: the names of the
// kinds probe/ declares (probe.Kinds), for the commands and tests that name one.
const (
	ProbeFsync    = "fsync"
	ProbeRandread = "randread"
	ProbeSeqread  = "seqread"
	ProbeSeqwrite = "seqwrite"
	ProbeCommit   = "commit"
)

// ProbeConfig is one probe's settings (probe.Settings); a kind uses the fields its Keys
// name.
type ProbeConfig = probe.Settings

// ProbeKinds are the probe kinds, in scheduling order: each declared in its own file in
// probe/ (probe.Kind), which is all the parser and the checks read of a kind.
func ProbeKinds() []*probe.Kind { return probe.Kinds() }

// LookupProbe is the kind named name, or nil.
func LookupProbe(name string) *probe.Kind { return probe.LookupKind(name) }

// OnByDefault says whether a target of type typ runs probe kind k when it names no probes
// (probe.Kind.DefaultOn).
func OnByDefault(k *probe.Kind, typ TargetType) bool {
	switch typ {
	case TypeDirectory:
		return k.DefaultOn.Has(probe.OnDirectories)
	case TypeBlockDevice:
		return k.DefaultOn.Has(probe.OnBlockDevices)
	}
	return false
}
