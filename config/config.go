// Package config reads and validates the diskprobe_exporter configuration file.
//
// The YAML is walked node by node rather than unmarshalled into structs, so that every
// error can name the file, the line and the field (`diskprobe.yml:4: targets[0]: unknown
// field "fsyncc"`) and unknown keys are always errors.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// TargetType is what a target's path is. The values are the `kind` label of
// diskprobe_target_info (a label the dashboards and rules read: it keeps its name).
type TargetType string

// The target types: a directory holds probe files; a block device is only read.
const (
	TypeDirectory   TargetType = "directory"
	TypeBlockDevice TargetType = "blockdev"
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
	Type     TargetType // what the path is on disk: set by SetType (AssumedDirectory until the path answers)
	Line     int        // line of the target in the file, for errors found after parsing
	Index    int        // position in the file's list of targets, for errors: targets[Index]
	// Lines are the lines of the fields the file gives, by their name under the target
	// ("path", "fsync", "fsync.block_size", "limits.bandwidth"), so that an error found
	// later, on disk, names the line of the field at fault (see FieldError).
	Lines map[string]int

	// Probe holds the enabled probes by kind name (see probe.Kinds); SetType fills in the
	// target type's defaults when the file names none.
	Probe  map[string]*ProbeConfig
	Limits Limits
	// Vantage, when set, has the target's probes run inside another process's cgroup and
	// I/O class (vantage.go); nil: the exporter's own.
	Vantage *Vantage
	Volume  *Volume // what the target's volume was sold as; nil when the file does not say
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

// LineOf is the line of field (e.g. "probe_dir", "fsync.block_size") in the file: the
// field's own, else that of the closest enclosing field the file gives (a default
// block_size is the probe's line), else the target's.
func (t *Target) LineOf(field string) int {
	for f := field; f != ""; {
		if line, ok := t.Lines[f]; ok {
			return line
		}
		i := strings.LastIndexByte(f, '.')
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return t.Line
}

// FieldError is a problem with field (e.g. "path", "fsync.block_size") of the target,
// located at the field's line. A %w in format makes that error its cause.
func (t *Target) FieldError(file, field, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{File: file, Line: t.LineOf(field), Field: fmt.Sprintf("targets[%d].%s", t.Index, field), Msg: err.Error(), Err: errors.Unwrap(err)}
}

// ProbeNames returns the names of the probes enabled on the target, in scheduling order.
func (t *Target) ProbeNames() []string {
	var out []string
	for _, k := range probe.Kinds() {
		if t.Probe[k.Name] != nil {
			out = append(out, k.Name)
		}
	}
	return out
}

// Interval returns the round interval of an enabled probe.
func (t *Target) Interval(probe string) time.Duration { return t.Probe[probe].Interval }

// ReadFileSize is the size of the read probe file: the largest file_size of the enabled
// probes that read it.
func (t *Target) ReadFileSize() int64 {
	var n int64
	for _, k := range probe.Kinds() {
		if c := t.Probe[k.Name]; c != nil && k.ReadsSource {
			n = max(n, c.FileSize)
		}
	}
	if n == 0 {
		return probe.DefaultReadFileSize
	}
	return n
}

// Summary is the one line `--config.check` prints.
func (c *Config) Summary() string {
	probes := 0
	s := ""
	for i, t := range c.Targets {
		probes += len(t.ProbeNames())
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (%s %s: %v", t.Name, t.Type, t.Path, t.ProbeNames())
		if t.ProbeDir != "" {
			s += ", probe files in " + t.ProbeDir
		}
		if t.Vantage != nil {
			s += ", as " + t.Vantage.What() + " sees it"
		}
		if t.Volume != nil {
			s += ", volume " + t.Volume.String()
		}
		s += ")"
	}
	return fmt.Sprintf("%s: %d targets, %d probes: %s", c.File, len(c.Targets), probes, s)
}
