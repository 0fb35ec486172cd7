package config

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Error is one problem in a configuration file, located by line and field.
type Error struct {
	File  string
	Line  int
	Field string // e.g. targets[0].fsync.interval
	Msg   string
	Err   error // the cause, when there is one (errors.Is sees EROFS, EACCES through it)
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	loc := filepath.Base(e.File)
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Field + ": " + e.Msg
}

// JoinErrors joins the errors of a file, parse-time and inspect-time alike, in the order
// of their lines (errors without a line first), so that one run reports every error of
// the file in the order a user fixes them. Nil when there are none.
func JoinErrors(errs ...error) error {
	var flat []error
	var walk func(err error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		} else if err != nil {
			flat = append(flat, err)
		}
	}
	for _, err := range errs {
		walk(err)
	}
	line := func(err error) int {
		var e *Error
		if errors.As(err, &e) {
			return e.Line
		}
		return 0
	}
	slices.SortStableFunc(flat, func(a, b error) int { return line(a) - line(b) })
	return errors.Join(flat...)
}

// parser collects every error of a file, so a user fixes them in one go.
type parser struct {
	file string
	errs []error
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Parse checks the schema and the values of a file's contents without looking at the disk,
// or making any system call. Relative target paths are taken relative to the file's
// directory, as file names it (ParseIn makes them absolute). With an error, the Config it
// returns, when not nil, holds the targets that parsed without one, for the caller to ask
// the disks about them too: every error of a file is reported in one run.
func Parse(data []byte, file string) (*Config, error) {
	return ParseIn(data, file, filepath.Dir(file))
}

// ParseIn is Parse with relative target paths taken from dir, the file's directory made
// absolute by the caller (filepath.Abs asks the working directory: a system call).
func ParseIn(data []byte, file, dir string) (*Config, error) {
	p := &parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line := yamlErrorLine(err)
		msg := yamlLineRE.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: "), "")
		return nil, &Error{File: file, Line: line, Msg: "invalid YAML: " + strings.TrimPrefix(msg, ": ")}
	}
	cfg := &Config{File: file}
	baseDir := dir
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: file, Msg: "empty file: expected a `targets:` list"}
	}
	root := doc.Content[0]
	p.mapping(root, "", func(key string, k, v *yaml.Node) bool {
		if key != "targets" {
			return false
		}
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, "targets", "must be a list of targets")
			return true
		}
		var parsed []Target
		var ok []bool
		for i, tn := range v.Content {
			t, good := p.target(tn, i, baseDir)
			parsed, ok = append(parsed, t), append(ok, good)
		}
		p.checkUnique(parsed)
		p.checkOutside(parsed)
		for i, t := range parsed {
			if ok[i] {
				cfg.Targets = append(cfg.Targets, t)
			}
		}
		return true
	})
	if len(p.errs) == 0 && len(cfg.Targets) == 0 {
		p.errorf(root, "targets", "no targets configured")
	}
	if len(p.errs) > 0 {
		return cfg, JoinErrors(p.errs...)
	}
	return cfg, nil
}

var yamlLineRE = regexp.MustCompile(`^line (\d+)`)

func yamlErrorLine(err error) int {
	if m := yamlLineRE.FindStringSubmatch(strings.TrimPrefix(err.Error(), "yaml: ")); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// mapping walks a YAML mapping, calling fn for each key; keys fn does not know are errors,
// as are duplicate keys and non-mapping nodes.
func (p *parser) mapping(n *yaml.Node, field string, fn func(key string, k, v *yaml.Node) bool) {
	if n.Kind == yaml.AliasNode {
		// Aliases are refused: walking them could expand a small file exponentially.
		p.errorf(n, field, "YAML aliases (*name) are not supported; write the values out")
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "expected a mapping, got %s", nodeKind(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		if line, dup := seen[key]; dup {
			p.errorf(k, field, "field %q given twice (first on line %d)", key, line)
			continue
		}
		seen[key] = k.Line
		if !fn(key, k, val) {
			p.errorf(k, field, "unknown field %q", key)
		}
	}
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.MappingNode:
		return "a mapping"
	}
	return "something else"
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

var targetNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

func (p *parser) target(n *yaml.Node, index int, baseDir string) (Target, bool) {
	field := fmt.Sprintf("targets[%d]", index)
	// Limits start from the defaults and the file's keys overwrite them, as each probe's
	// fields do below: every check that follows sees the values the target runs with.
	t := Target{Line: n.Line, Index: index, Limits: DefaultLimits, Lines: map[string]int{}}
	before := len(p.errs)
	var nameNode, pathNode, probeDirNode *yaml.Node
	p.mapping(n, field, func(key string, k, val *yaml.Node) bool {
		f := join(field, key)
		t.Lines[key] = k.Line
		if val.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(val.Content); i += 2 {
				t.Lines[key+"."+val.Content[i].Value] = val.Content[i].Line
			}
		}
		switch key {
		case "name":
			nameNode = val
			t.Name = p.str(val, f)
		case "path":
			pathNode = val
			t.Path = p.str(val, f)
		case "probe_dir":
			probeDirNode = val
			t.ProbeDir = p.str(val, f)
		case "limits":
			p.limits(val, f, &t.Limits)
		case "vantage":
			t.Vantage = p.vantage(val, f, baseDir)
		case "volume":
			t.Volume = p.volume(val, f)
		default:
			k := LookupProbe(key)
			if k == nil {
				return false
			}
			c := k.Defaults // the file's keys overwrite the defaults; the checks see both
			p.probeFields(val, f, &c, k)
			if t.Probe == nil {
				t.Probe = map[string]*ProbeConfig{}
			}
			t.Probe[key] = &c
		}
		return true
	})
	if n.Kind != yaml.MappingNode {
		return t, false
	}
	switch {
	case nameNode == nil:
		p.errorf(n, field, "missing field \"name\"")
	case !targetNameRE.MatchString(t.Name):
		p.errorf(nameNode, join(field, "name"), "%q is not a valid target name: use 1-64 letters, digits, '_', '.', ':' or '-', starting with a letter or digit", t.Name)
	}
	switch {
	case pathNode == nil:
		p.errorf(n, field, "missing field \"path\"")
	case t.Path == "":
		p.errorf(pathNode, join(field, "path"), "must not be empty")
	default:
		if !filepath.IsAbs(t.Path) {
			t.Path = filepath.Join(baseDir, t.Path)
		}
		t.Path = filepath.Clean(t.Path)
	}
	if probeDirNode != nil {
		if t.ProbeDir == "" {
			p.errorf(probeDirNode, join(field, "probe_dir"), "must not be empty")
		} else {
			if !filepath.IsAbs(t.ProbeDir) {
				t.ProbeDir = filepath.Join(baseDir, t.ProbeDir)
			}
			t.ProbeDir = filepath.Clean(t.ProbeDir)
		}
	}
	p.checkProbes(&t)
	return t, len(p.errs) == before
}

func (p *parser) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, field, "expected a string, got %s", nodeKind(n))
		return ""
	}
	return n.Value
}

// probeFields reads the keys of a probe of kind k into c, which holds the kind's
// defaults: the keys the kind lists (probe.Kind.Keys); any other key is an unknown field.
func (p *parser) probeFields(n *yaml.Node, field string, c *ProbeConfig, k *probe.Kind) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // `fsync:` with nothing after it: on, with defaults
	}
	p.mapping(n, field, func(key string, _, val *yaml.Node) bool {
		if !k.Takes(key) {
			return false
		}
		f := join(field, key)
		switch key {
		case "interval":
			if d, ok := p.duration(val, f); ok {
				if d < time.Second {
					p.errorf(val, f, "must be at least 1s, got %s", val.Value)
				}
				c.Interval = d
			}
		case "ops":
			if i, ok := p.count(val, f); ok {
				c.Ops = i
			}
		case "bytes":
			if s, ok := p.size(val, f); ok {
				c.Bytes = s
			}
		case "block_size":
			if s, ok := p.size(val, f); ok {
				if s > MaxBlockSize {
					p.errorf(val, f, "must be at most 64MiB, got %s", val.Value)
				}
				c.BlockSize = s
			}
		case "file_size":
			if s, ok := p.size(val, f); ok {
				c.FileSize = s
			}
		case "pages":
			if i, ok := p.count(val, f); ok {
				c.Pages = i
			}
		default:
			return false
		}
		return true
	})
}

func (p *parser) limits(n *yaml.Node, field string, l *Limits) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	p.mapping(n, field, func(key string, k, val *yaml.Node) bool {
		f := join(field, key)
		switch key {
		case "iops":
			x, err := strconv.ParseFloat(val.Value, 64)
			if val.Kind != yaml.ScalarNode || err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				p.errorf(val, f, "expected a number of operations per second, got %s", nodeKind(val))
			} else if x <= 0 {
				p.errorf(val, f, "must be greater than 0, got %s", val.Value)
			} else {
				l.IOPS = x
			}
		case "bandwidth":
			if s, ok := p.size(val, f); ok {
				l.Bandwidth = s
			}
		case "timeout":
			if d, ok := p.duration(val, f); ok {
				if d < time.Second {
					p.errorf(val, f, "must be at least 1s, got %s", val.Value)
				}
				l.Timeout = d
			}
		case "min_free":
			if s, ok := p.sizeOrZero(val, f); ok {
				l.MinFree = s
			}
		default:
			return false
		}
		return true
	})
}

func (p *parser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, field, "expected a duration such as 15s or 10m, got %s", nodeKind(n))
		return 0, false
	}
	d, err := model.ParseDuration(n.Value)
	if err != nil {
		p.errorf(n, field, "expected a duration such as 15s or 10m, got %q", n.Value)
		return 0, false
	}
	return time.Duration(d), true
}

func (p *parser) count(n *yaml.Node, field string) (int, bool) {
	i, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		p.errorf(n, field, "expected a whole number, got %s", nodeKind(n))
		return 0, false
	}
	if i <= 0 || i > 1_000_000 {
		p.errorf(n, field, "must be between 1 and 1000000, got %d", i)
		return 0, false
	}
	return i, true
}

func (p *parser) size(n *yaml.Node, field string) (int64, bool) {
	s, ok := p.sizeOrZero(n, field)
	if ok && s == 0 {
		p.errorf(n, field, "must be greater than 0")
		return 0, false
	}
	return s, ok
}

func (p *parser) sizeOrZero(n *yaml.Node, field string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, field, "expected a size such as 4096, 4KiB, 64MiB or 1GiB, got %s", nodeKind(n))
		return 0, false
	}
	s, err := ParseSize(n.Value)
	if err != nil {
		p.errorf(n, field, "%v", err)
		return 0, false
	}
	return s, true
}

// ParseSize reads a byte count: a plain number of bytes, or a number with a KiB, MiB, GiB
// or TiB suffix. Decimal units (KB, MB) are refused rather than guessed at.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("expected a size such as 4096, 4KiB, 64MiB or 1GiB, got %q", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize writes a byte count the way the config takes it: "4KiB", "2300", which
// ParseSize reads back (bytesize.Config).
func FormatSize(n int64) string { return bytesize.Config(n) }

// checkProbes checks the probes a target will run, whichever type its path turns out to
// be: the ones it names, or the default ones of a directory and of a block device when it
// names none (probesFor). Each error is reported once, even when both types share it.
func (p *parser) checkProbes(t *Target) {
	seen := map[string]bool{}
	add := func(err *Error) {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			p.errs = append(p.errs, err)
		}
	}
	for _, typ := range []TargetType{TypeDirectory, TypeBlockDevice} {
		probes := t.probesFor(typ)
		for _, k := range probe.Kinds() {
			c := probes[k.Name]
			if c == nil {
				continue
			}
			if k.Check != nil {
				if key, msg := k.Check(c); msg != "" {
					add(t.FieldError(p.file, k.Name+"."+key, "%s", msg))
				}
			}
			// A block the bandwidth limit could never let through.
			if t.Limits.Bandwidth > 0 && c.BlockSize > t.Limits.Bandwidth {
				hint := ""
				if len(t.Probe) == 0 {
					hint = fmt.Sprintf(" (%s runs by default when a target names no probes: name the probes to run, or give %s a smaller block_size)", k.Name, k.Name)
				}
				add(t.FieldError(p.file, "limits.bandwidth", "%s per second is less than one %s block (%s): the probe could never run%s", FormatSize(t.Limits.Bandwidth), k.Name, FormatSize(c.BlockSize), hint))
			}
		}
	}
}

// checkUnique refuses a name or a path given twice. Both targets are still inspected, for
// what the disk says about them: the error alone keeps the file from being applied.
func (p *parser) checkUnique(targets []Target) {
	names := map[string]int{}
	paths := map[string]string{}
	for _, t := range targets {
		if t.Name != "" {
			if first, dup := names[t.Name]; dup {
				p.errs = append(p.errs, t.FieldError(p.file, "name", "target name %q is already used on line %d", t.Name, first))
			} else {
				names[t.Name] = t.LineOf("name")
			}
		}
		if t.Path != "" {
			if other, dup := paths[pathKey(&t)]; dup {
				p.errs = append(p.errs, t.FieldError(p.file, "path", "%s is already probed by target %q", t.Path, other))
			} else {
				paths[pathKey(&t)] = t.Name
			}
		}
	}
	// Two targets keeping their files in one .diskprobe would replace each other's files
	// at every round. Same paths are refused above; this is a probe_dir equal to another
	// target's path or probe_dir.
	roots := map[string]*Target{}
	for i := range targets {
		t := &targets[i]
		if t.Path == "" {
			continue
		}
		root := filepath.Clean(t.ProbeRoot())
		other, dup := roots[root]
		if !dup {
			roots[root] = t
			continue
		}
		if t.ProbeDir == "" && other.ProbeDir == "" && pathKey(t) == pathKey(other) {
			continue // the same path, refused above
		}
		field := "path"
		if t.ProbeDir != "" {
			field = "probe_dir"
		}
		p.errs = append(p.errs, t.FieldError(p.file, field, "%s already holds the probe files of target %q (line %d): two targets in one probe directory would replace each other's files; give each a probe_dir of its own",
			root, other.Name, other.LineOf("name")))
	}
}
