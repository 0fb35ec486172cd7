package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/diskprobe/diskprobe_exporter/probe"
)

// Loop is one run of a probe in a process of its own: the probe package with the
// Unlimited budget, every timed system call kept. A process of its own gives exact CPU
// figures (wait4) and lets the run join a blkio cgroup without the test joining it.
type Loop struct {
	Kind      string `json:"kind"` // "fsync", "randread" or "seqread"
	Dir       string `json:"dir"`  // the target directory
	Ops       int    `json:"ops"`  // fsync and randread: operations
	Bytes     int64  `json:"bytes"`
	BlockSize int    `json:"block_size"`
	FileSize  int64  `json:"file_size"` // fsync: the preallocated file; reads: the prepared file's data
	Cgroup    string `json:"cgroup"`    // cgroup.procs to join before any I/O; "" for none
}

// LoopResult is what the process measured.
type LoopResult struct {
	Ops       int             `json:"ops"`
	Bytes     int64           `json:"bytes"`
	IO        time.Duration   `json:"io"`
	Sync      []time.Duration `json:"sync,omitempty"`  // fsync: each fdatasync
	Write     []time.Duration `json:"write,omitempty"` // fsync: each write
	Read      []time.Duration `json:"read,omitempty"`  // randread: each pread
	User, Sys time.Duration   `json:"-"`               // CPU of the whole process, from wait4
}

// loopEnv names the environment variable that turns the test binary into a Loop process.
const loopEnv = "DISKPROBE_BENCH_LOOP"

// RunLoop runs l in a child process (the test binary itself, see TestMain).
func RunLoop(l Loop) (*LoopResult, error) {
	spec, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	out, err := os.CreateTemp("", "diskprobe-loop-*.json")
	if err != nil {
		return nil, err
	}
	_ = out.Close()
	defer func() { _ = os.Remove(out.Name()) }()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), loopEnv+"="+string(spec), loopEnv+"_OUT="+out.Name())
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s loop: %v\n%s", l.Kind, err, msg)
	}
	data, err := os.ReadFile(out.Name())
	if err != nil {
		return nil, err
	}
	var r LoopResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.User, r.Sys = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	return &r, nil
}

// LoopMain is the child's side of RunLoop; it reports whether it ran (and exits then).
func LoopMain() bool {
	spec := os.Getenv(loopEnv)
	if spec == "" {
		return false
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var l Loop
	if err := json.Unmarshal([]byte(spec), &l); err != nil {
		fail(err)
	}
	if l.Cgroup != "" {
		if err := os.WriteFile(l.Cgroup, []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
			fail(fmt.Errorf("joining cgroup: %w", err))
		}
	}
	r, err := l.run()
	if err != nil {
		fail(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(os.Getenv(loopEnv+"_OUT"), data, 0o600); err != nil {
		fail(err)
	}
	os.Exit(0)
	return true
}

func (l Loop) run() (*LoopResult, error) {
	ctx := context.Background()
	r := &LoopResult{}
	// Capacity for every sample up front: the loop itself must not allocate.
	switch l.Kind {
	case "fsync":
		p, err := probe.NewFsync(probe.FsyncOptions{Dir: l.Dir, Ops: l.Ops, BlockSize: l.BlockSize, FileSize: l.FileSize})
		if err != nil {
			return nil, err
		}
		defer func() { _ = p.Remove() }()
		r.Sync = make([]time.Duration, 0, l.Ops)
		r.Write = make([]time.Duration, 0, l.Ops)
		env := &probe.Env{Budget: probe.Unlimited, Observe: func(s probe.Sample) {
			if s.Phase == probe.PhaseFdatasync {
				r.Sync = append(r.Sync, s.Duration)
			} else {
				r.Write = append(r.Write, s.Duration)
			}
		}}
		res, err := p.Round(ctx, env)
		r.Ops, r.Bytes, r.IO = res.Ops, res.Bytes, res.IO
		return r, err
	case "randread", "seqread":
		src, err := probe.NewReadFile(l.Dir, l.FileSize, 0, 0)
		if err != nil {
			return nil, err
		}
		defer func() { _ = src.Close() }()
		if err := Prepare(ctx, src); err != nil {
			return nil, err
		}
		var p probe.Prober
		if l.Kind == "randread" {
			p, err = probe.NewRandread(src, l.Ops, l.BlockSize)
		} else {
			p, err = probe.NewSeqread(src, l.Bytes, l.BlockSize)
		}
		if err != nil {
			return nil, err
		}
		defer func() { _ = p.Close() }()
		r.Read = make([]time.Duration, 0, l.Ops)
		env := &probe.Env{Budget: probe.Unlimited, Observe: func(s probe.Sample) { r.Read = append(r.Read, s.Duration) }}
		res, err := p.Round(ctx, env)
		r.Ops, r.Bytes, r.IO = res.Ops, res.Bytes, res.IO
		return r, err
	}
	return nil, fmt.Errorf("unknown loop kind %q", l.Kind)
}

// Prepare writes (or reuses) a read probe file completely, as the daemon's worker does
// in steps.
func Prepare(ctx context.Context, src *probe.ReadSource) error {
	return src.Prepare(ctx, &probe.Env{Budget: probe.Unlimited}, nil)
}
