package config

import (
	"time"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// The defaults of the configuration are here and in the probe kinds' declarations
// (probe.Kind.Defaults, each in its kind's file in probe/): docs/configuration.md lists
// each one (its test compares the table with these values). They are applied before any
// check, as blackbox_exporter's UnmarshalYAML starts a module from DefaultModule and lets
// the file's keys overwrite it: the parser starts a target's limits from DefaultLimits and
// a probe's fields from its kind's defaults, then reads the keys; the probes of a target
// that names none are probesFor's, which the parser checks for both target types before
// the disk is asked. So a default meets every check a value written in the file meets.

// DefaultLimits are a target's limits; each key under `limits` replaces its field.
var DefaultLimits = Limits{IOPS: 200, Bandwidth: 50 * MiB, Timeout: 30 * time.Second, MinFree: 1 * GiB}

// Default is the configuration of a probe of kind name as an empty key gives it.
func Default(name string) ProbeConfig { return LookupProbe(name).Defaults }

// probesFor is the one place a target's probes are decided: those its file names, each
// with its kind's defaults for the fields left out (filled in by the parser), or, when it
// names none, the default probes of a target of that type (probe.Kind.DefaultOn: a
// directory fsync, randread and seqread; a block device randread and seqread). The parser
// checks what this returns for every type a target may turn out to be, before the disk is
// asked, so a default probe meets the same checks as a named one.
func (t *Target) probesFor(typ TargetType) map[string]*ProbeConfig {
	probes := map[string]*ProbeConfig{}
	for _, k := range probe.Kinds() {
		switch {
		case len(t.Probe) > 0 && t.Probe[k.Name] != nil:
			probes[k.Name] = t.Probe[k.Name]
		case len(t.Probe) == 0 && OnByDefault(k, typ):
			c := k.Defaults
			probes[k.Name] = &c
		}
	}
	return probes
}

// applyTypeDefaults sets the probes the target runs as a target of that type (see
// probesFor). It makes a new map: t may be a copy sharing its map with the parsed target.
func (t *Target) applyTypeDefaults(typ TargetType) {
	t.Probe = t.probesFor(typ)
}
