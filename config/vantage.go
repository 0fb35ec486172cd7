package config

import (
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Vantage is a target's `vantage:` block: the process whose view of the disk the target's
// probes take, from inside its blkio cgroup and I/O class (package vantage, which config
// does not import: it asks /proc).
type Vantage struct {
	// Exactly one names the process: its name (/proc/PID/comm), a file holding its PID
	// (absolute, cleaned), or its cgroup path as /proc/PID/cgroup writes it.
	Process, PIDFile, Cgroup string
	// Outside names the target that probes the same disk from the exporter's own cgroup,
	// for the rules that set the two side by side; "" when there is none.
	Outside string
}

// vantage reads a `vantage:` block: exactly one of process, pid_file or cgroup, and
// optionally outside (checked against the other targets by checkOutside).
func (p *parser) vantage(n *yaml.Node, field, baseDir string) *Vantage {
	v := &Vantage{}
	given := 0
	p.mapping(n, field, func(key string, _, val *yaml.Node) bool {
		f := join(field, key)
		switch key {
		case "process":
			given++
			v.Process = p.str(val, f)
			if v.Process == "" || strings.ContainsRune(v.Process, '/') {
				p.errorf(val, f, "expected a process name as /proc/PID/comm shows it (such as etcd), got %q", v.Process)
			}
		case "pid_file":
			given++
			v.PIDFile = p.str(val, f)
			if v.PIDFile == "" {
				p.errorf(val, f, "must not be empty")
			} else if !filepath.IsAbs(v.PIDFile) {
				v.PIDFile = filepath.Join(baseDir, v.PIDFile)
			} else {
				v.PIDFile = filepath.Clean(v.PIDFile)
			}
		case "cgroup":
			given++
			v.Cgroup = p.str(val, f)
			if !strings.HasPrefix(v.Cgroup, "/") || filepath.Clean(v.Cgroup) != v.Cgroup {
				p.errorf(val, f, "expected a cgroup path as /proc/PID/cgroup writes it (such as /system.slice/etcd.service), got %q", v.Cgroup)
			}
		case "outside":
			v.Outside = p.str(val, f)
		default:
			return false
		}
		return true
	})
	if n.Kind == yaml.MappingNode && given != 1 {
		p.errorf(n, field, "name the process to take the view of with exactly one of process, pid_file or cgroup")
	}
	return v
}

// What is how logs and the summary name the process.
func (v *Vantage) What() string {
	switch {
	case v.Process != "":
		return "process " + v.Process
	case v.PIDFile != "":
		return "pid_file " + v.PIDFile
	}
	return "cgroup " + v.Cgroup
}

// pathKey is what two targets may not share: a path seen from one place. The same path
// is two targets when one sees it from inside a process's cgroup and the other from the
// exporter's (vantage.outside).
func pathKey(t *Target) string {
	if t.Vantage == nil {
		return t.Path
	}
	return t.Path + "\x00as " + t.Vantage.What()
}

// checkOutside refuses an `outside` that names no other target of the file, or one that
// has a vantage of its own.
func (p *parser) checkOutside(targets []Target) {
	byName := map[string]*Target{}
	for i := range targets {
		byName[targets[i].Name] = &targets[i]
	}
	for _, t := range targets {
		if t.Vantage == nil || t.Vantage.Outside == "" {
			continue
		}
		o := byName[t.Vantage.Outside]
		switch {
		case o == nil || o.Name == t.Name:
			p.errs = append(p.errs, t.FieldError(p.file, "vantage.outside", "%q is not another target of this file: name the target that probes the same disk from outside", t.Vantage.Outside))
		case o.Vantage != nil:
			p.errs = append(p.errs, t.FieldError(p.file, "vantage.outside", "target %q has a vantage of its own: outside names a target probing from the exporter's own cgroup", o.Name))
		}
	}
}
