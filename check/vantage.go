package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/diskprobe/diskprobe_exporter/vantage"
)

// VantageReport is the etcd profile run twice on the same path: from the exporter's own
// cgroup and I/O class (Outside), then from inside a process's (Inside), on a thread that
// has joined them as the daemon's vantage does; and what the difference says.
type VantageReport struct {
	Outside, Inside *Report
	Process         string // the process's name (its comm)
	View            vantage.View
	Throttles       []string // the limits on the process's cgroup (vantage.Throttles)
	Finding         string   // what the two verdicts together say
}

// RunVantage runs the etcd profile from outside, then from inside the process spec names.
// The process is found before either run, so that a wrong name or PID costs no I/O.
// Only the measuring goroutine runs on the joined thread: --load's competing I/O, the
// neighbours', runs from the exporter's cgroup in both runs.
func RunVantage(ctx context.Context, opts Options, spec vantage.Spec) (*VantageReport, error) {
	r := &vantage.Resolver{ProcFS: opts.Paths.ProcFS, Spec: spec}
	view, err := r.Resolve()
	if err != nil {
		return nil, fmt.Errorf("--vantage: %w", err)
	}
	rep := &VantageReport{View: view, Process: r.Comm(view.PID), Throttles: vantage.Throttles(view)}
	if rep.Outside, err = Run(ctx, opts); err != nil {
		return nil, err
	}
	th := vantage.StartThread()
	defer th.Stop()
	if err := th.Join(view); err != nil {
		return nil, fmt.Errorf("--vantage: %w", err)
	}
	th.Do(func() { rep.Inside, err = Run(ctx, opts) })
	if err != nil {
		return nil, err
	}
	rep.Finding = rep.finding()
	return rep, nil
}

// The findings, in the words of the alerts and the runbook ("etcd" standing for the
// process's name).
const (
	FindingThrottled = "the disk is fast, %s's cgroup is throttled"
	FindingEveryone  = "the disk is slow for everyone"
	FindingNeighbour = "%s waits on I/O behind a neighbour in a higher class"
	FindingFast      = "the disk is fast, from %s's cgroup as from outside"
	FindingOutside   = "the disk is slow only from outside: %s's cgroup and class are not what holds it back"
)

func (v *VantageReport) finding() string {
	slowIn, slowOut := v.Inside.Verdict == Fail, v.Outside.Verdict == Fail
	name := v.Process
	if name == "" {
		name = "the process"
	}
	switch {
	case slowIn && slowOut:
		return FindingEveryone
	case slowIn && len(v.Throttles) > 0:
		return fmt.Sprintf(FindingThrottled, name)
	case slowIn:
		return fmt.Sprintf(FindingNeighbour, name)
	case slowOut:
		return fmt.Sprintf(FindingOutside, name)
	}
	return fmt.Sprintf(FindingFast, name)
}

// ExitCode is 1 when either run's verdict is FAIL: a slow disk from either side needs a
// look, and the finding says which.
func (v *VantageReport) ExitCode() int { return max(v.Outside.ExitCode(), v.Inside.ExitCode()) }

func (v *VantageReport) where() string {
	return fmt.Sprintf("PID %d (%s), cgroup %s, I/O class %s", v.View.PID, v.Process, v.View.BlkioPath, v.View.IOPrio)
}

// WriteText writes both reports, outside first, each under a line that says which, and
// then the difference.
func (v *VantageReport) WriteText(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("== outside: from the exporter's own cgroup and I/O class\n\n")
	if err := v.Outside.WriteText(&b); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n== inside: from %s\n\n", v.where())
	if err := v.Inside.WriteText(&b); err != nil {
		return err
	}
	b.WriteString("\n== inside against outside\n")
	if in, out := v.Inside.Fsync, v.Outside.Fsync; in != nil && out != nil {
		fmt.Fprintf(&b, "fdatasync p99: inside %s, outside %s", FormatDuration(in.Fdatasync.P99), FormatDuration(out.Fdatasync.P99))
		if out.Fdatasync.P99 > 0 {
			fmt.Fprintf(&b, " (%.1f×)", float64(in.Fdatasync.P99)/float64(out.Fdatasync.P99))
		}
		b.WriteString("\n")
	}
	if in, out := v.Inside.Commit, v.Outside.Commit; in != nil && out != nil {
		fmt.Fprintf(&b, "commit p99:    inside %s, outside %s\n", FormatDuration(in.Commit.P99), FormatDuration(out.Commit.P99))
	}
	throttles := "none"
	if len(v.Throttles) > 0 {
		throttles = strings.Join(v.Throttles, "; ")
	}
	fmt.Fprintf(&b, "limits on the cgroup: %s\n", throttles)
	fmt.Fprintf(&b, "%s %s\n", verdictPair(v), v.Finding)
	_, err := w.Write(b.Bytes())
	return err
}

func verdictPair(v *VantageReport) string {
	return fmt.Sprintf("inside %s, outside %s:", v.Inside.Verdict, v.Outside.Verdict)
}

// WriteJSON writes one object: the vantage, the finding, and both reports as the plain
// check writes them.
func (v *VantageReport) WriteJSON(w io.Writer) error {
	raw := func(r *Report) (json.RawMessage, error) {
		var b bytes.Buffer
		err := r.WriteJSON(&b)
		return b.Bytes(), err
	}
	out := struct {
		Profile string `json:"profile"`
		Vantage struct {
			PID       int      `json:"pid"`
			Process   string   `json:"process"`
			Cgroup    string   `json:"cgroup"`
			IOPrio    string   `json:"ioprio"`
			Throttles []string `json:"throttles"`
		} `json:"vantage"`
		Finding  string          `json:"finding"`
		ExitCode int             `json:"exit_code"`
		Outside  json.RawMessage `json:"outside"`
		Inside   json.RawMessage `json:"inside"`
	}{Profile: ProfileEtcd, Finding: v.Finding, ExitCode: v.ExitCode()}
	out.Vantage.PID, out.Vantage.Process, out.Vantage.Cgroup, out.Vantage.IOPrio = v.View.PID, v.Process, v.View.BlkioPath, v.View.IOPrio.String()
	out.Vantage.Throttles = append([]string{}, v.Throttles...)
	var err error
	if out.Outside, err = raw(v.Outside); err != nil {
		return err
	}
	if out.Inside, err = raw(v.Inside); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
