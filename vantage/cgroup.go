package vantage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// mounts are the cgroup hierarchies this process sees (its mountinfo): the v1 blkio one
// and the unified (v2) one, each a mount point and the cgroup at its root.
type mounts struct {
	blkio, unified mountPoint
}

type mountPoint struct{ dir, root string }

func (m mountPoint) ok() bool { return m.dir != "" }

// dirOf is the directory of cgroup path (as /proc/PID/cgroup writes it) under m.
func (m mountPoint) dirOf(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok || (m.root != "/" && rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", false
	}
	return filepath.Join(m.dir, rel), true
}

func readMounts(file string) (mounts, error) {
	f, err := os.Open(file)
	if err != nil {
		return mounts{}, err
	}
	defer func() { _ = f.Close() }()
	var m mounts
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		mp := mountPoint{dir: unescape(fields[4]), root: unescape(fields[3])}
		switch fields[sep+1] {
		case "cgroup2":
			if !m.unified.ok() {
				m.unified = mp
			}
		case "cgroup":
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o == "blkio" && !m.blkio.ok() {
					m.blkio = mp
				}
			}
		}
	}
	return m, sc.Err()
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// readCgroups reads /proc/PID/cgroup: the cgroup path by v1 controller, "" for the
// unified hierarchy (the `0::/path` line).
func readCgroups(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// errNoHierarchy is a host with neither a blkio nor a unified cgroup hierarchy mounted.
var errNoHierarchy = errors.New("no blkio (cgroup v1) or cgroup2 hierarchy is mounted (see /proc/self/mountinfo)")

// place fills in v's cgroup directories from the process's cgroups (readCgroups): its
// blkio cgroup where there is a v1 blkio hierarchy (a hybrid host such as this one),
// else its unified one, where the io controller lives on a v2-only host.
func (m mounts) place(v *View, groups map[string]string) error {
	if p, ok := groups[""]; ok && m.unified.ok() {
		if dir, ok := m.unified.dirOf(p); ok {
			v.UnifiedDir = dir
		}
	}
	if p, ok := groups["blkio"]; ok && m.blkio.ok() {
		dir, ok := m.blkio.dirOf(p)
		if !ok {
			return fmt.Errorf("blkio cgroup %s is outside the hierarchy mounted at %s (root %s)", p, m.blkio.dir, m.blkio.root)
		}
		v.BlkioPath, v.BlkioDir = p, dir
		return nil
	}
	if p, ok := groups[""]; ok && m.unified.ok() && v.UnifiedDir != "" {
		v.BlkioPath, v.BlkioDir, v.V2 = p, v.UnifiedDir, true
		return nil
	}
	return errNoHierarchy
}

// Throttles are the limits set on v's cgroup itself, one "file MAJ:MIN value" line each:
// blkio.throttle.* on cgroup v1, io.max on v2. Limits of a parent are not read: on v1
// they do not bind a child's processes (blk-throttle without the unified hierarchy's
// inheritance), and on v2 they would have to be walked up the tree.
func Throttles(v View) []string {
	files := []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device", "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"}
	if v.V2 {
		files = []string{"io.max"}
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(v.BlkioDir, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if line != "" {
				out = append(out, strings.TrimPrefix(f, "blkio.throttle.")+" "+line)
			}
		}
	}
	return out
}
