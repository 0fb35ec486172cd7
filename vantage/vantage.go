// Package vantage lets a probe see the disk as another process sees it: it finds that
// process (by name, PID file or cgroup), its blkio cgroup and its I/O priority, and keeps
// an OS thread that has joined both (Thread), on which the probe's rounds run. It also
// reads the pressure (PSI) the process's cgroup and the host report. It makes no I/O on
// any target and knows nothing of Prometheus.
package vantage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Spec names the process whose view a target takes: exactly one of its fields.
type Spec struct {
	Process string // a process name, matched against /proc/PID/comm
	PIDFile string // a file holding the process's PID
	Cgroup  string // a cgroup path as /proc/PID/cgroup writes it, e.g. /system.slice/etcd.service
	PID     int    // a process id, as check --vantage takes one
}

// String is how logs name the spec.
func (s Spec) String() string {
	switch {
	case s.Process != "":
		return "process " + s.Process
	case s.PIDFile != "":
		return "pid_file " + s.PIDFile
	case s.PID > 0:
		return "PID " + strconv.Itoa(s.PID)
	}
	return "cgroup " + s.Cgroup
}

// View is where a process stands: what a thread joins to see the disk as it does.
type View struct {
	PID int // 0 for a cgroup spec whose cgroup holds no process
	// BlkioPath is the blkio (cgroup v1) or unified (v2, when there is no blkio
	// hierarchy) cgroup as /proc/PID/cgroup names it; BlkioDir is its directory.
	BlkioPath, BlkioDir string
	V2                  bool   // no blkio hierarchy: BlkioDir is in the unified one
	UnifiedDir          string // the process's cgroup v2 directory, for its PSI; "" without a cgroup2 mount
	IOPrio              IOPrio
}

// Same is whether a thread joined to v sees what one joined to o does: the same cgroup
// and the same I/O priority (a restarted process keeps its view).
func (v View) Same(o View) bool {
	return v.BlkioDir == o.BlkioDir && v.IOPrio == o.IOPrio
}

// ErrNoProcess is a spec that names no running process now (or an empty PID file):
// the vantage has nothing to join this round.
var ErrNoProcess = errors.New("no such process")

// Resolver finds a spec's process, again at each call, so that a restarted or moved
// process is followed. Not safe for concurrent use.
type Resolver struct {
	ProcFS string // "/proc" when empty
	Spec   Spec
	Self   int // this process's PID, never matched by name; os.Getpid() when 0
	last   int // the PID last found by name: checked first, so a round reads one comm, not all
}

func (r *Resolver) procfs() string {
	if r.ProcFS == "" {
		return "/proc"
	}
	return r.ProcFS
}

// Resolve finds the process and where it stands now.
func (r *Resolver) Resolve() (View, error) {
	mounts, err := readMounts(filepath.Join(r.procfs(), "self", "mountinfo"))
	if err != nil {
		return View{}, err
	}
	if r.Spec.Cgroup != "" {
		return r.cgroupView(mounts)
	}
	pid, err := r.pid()
	if err != nil {
		return View{}, err
	}
	return r.processView(mounts, pid)
}

func (r *Resolver) pid() (int, error) {
	if pid := r.Spec.PID; pid > 0 {
		if _, err := os.Stat(filepath.Join(r.procfs(), strconv.Itoa(pid))); err != nil {
			return 0, fmt.Errorf("PID %d: %w", pid, ErrNoProcess)
		}
		return pid, nil
	}
	if r.Spec.PIDFile != "" {
		data, err := os.ReadFile(r.Spec.PIDFile)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return 0, fmt.Errorf("pid_file %s: %w", r.Spec.PIDFile, ErrNoProcess)
			}
			return 0, fmt.Errorf("pid_file: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("pid_file %s holds %q, not a PID: %w", r.Spec.PIDFile, strings.TrimSpace(string(data)), ErrNoProcess)
		}
		if _, err := os.Stat(filepath.Join(r.procfs(), strconv.Itoa(pid))); err != nil {
			return 0, fmt.Errorf("pid_file %s: PID %d: %w", r.Spec.PIDFile, pid, ErrNoProcess)
		}
		return pid, nil
	}
	if r.last > 0 && r.comm(r.last) == commOf(r.Spec.Process) {
		return r.last, nil
	}
	pids, err := r.byName(r.Spec.Process)
	switch {
	case err != nil:
		return 0, err
	case len(pids) == 0:
		return 0, fmt.Errorf("process %q: %w", r.Spec.Process, ErrNoProcess)
	case len(pids) > 1:
		return 0, fmt.Errorf("process %q is ambiguous: PIDs %v have that name; name the one to follow with pid_file or cgroup", r.Spec.Process, pids)
	}
	r.last = pids[0]
	return pids[0], nil
}

// commOf is how the kernel keeps a name in /proc/PID/comm: its first 15 bytes.
func commOf(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

func (r *Resolver) comm(pid int) string {
	data, err := os.ReadFile(filepath.Join(r.procfs(), strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// byName lists the processes whose comm is name's, other than this one.
func (r *Resolver) byName(name string) ([]int, error) {
	entries, err := os.ReadDir(r.procfs())
	if err != nil {
		return nil, err
	}
	self := r.Self
	if self == 0 {
		self = os.Getpid()
	}
	want := commOf(name)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if r.comm(pid) == want {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

func (r *Resolver) processView(m mounts, pid int) (View, error) {
	groups, err := readCgroups(filepath.Join(r.procfs(), strconv.Itoa(pid), "cgroup"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return View{}, fmt.Errorf("PID %d: %w", pid, ErrNoProcess)
		}
		return View{}, err
	}
	v := View{PID: pid}
	if err := m.place(&v, groups); err != nil {
		return View{}, fmt.Errorf("PID %d: %w", pid, err)
	}
	if v.IOPrio, err = ProcessIOPrio(pid); err != nil {
		return View{}, fmt.Errorf("PID %d: %w", pid, err)
	}
	return v, nil
}

// cgroupView is the view of a cgroup named by its path: the same path in the blkio and
// unified hierarchies (systemd and the kubelet's cgroup driver keep them alike), and the
// I/O priority of its first process, if it holds one.
func (r *Resolver) cgroupView(m mounts) (View, error) {
	path := r.Spec.Cgroup
	v := View{}
	if err := m.place(&v, map[string]string{"blkio": path, "": path}); err != nil {
		return View{}, err
	}
	if _, err := os.Stat(v.BlkioDir); err != nil {
		return View{}, fmt.Errorf("cgroup %s: %w", path, ErrNoProcess)
	}
	if v.UnifiedDir != "" {
		if _, err := os.Stat(v.UnifiedDir); err != nil {
			v.UnifiedDir = ""
		}
	}
	data, _ := os.ReadFile(filepath.Join(v.BlkioDir, "cgroup.procs"))
	if f := strings.Fields(string(data)); len(f) > 0 {
		v.PID, _ = strconv.Atoi(f[0])
		p, err := ProcessIOPrio(v.PID)
		if err != nil {
			return View{}, fmt.Errorf("cgroup %s: PID %d: %w", path, v.PID, err)
		}
		v.IOPrio = p
	} else {
		p, err := ProcessIOPrio(os.Getpid())
		if err != nil {
			return View{}, err
		}
		v.IOPrio = p
	}
	return v, nil
}

// Comm is the name of process pid as /proc/PID/comm gives it, "" when it has none.
func (r *Resolver) Comm(pid int) string { return r.comm(pid) }
