package check

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

// WriteText writes the summary an fio user recognises: the job, its rate, the latency
// percentiles of each timed system call, the device, then the verdict and its remarks.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "path:      %s\n", r.Path)
	fmt.Fprintf(&b, "device:    %s\n", deviceLine(r.Device))
	if f := r.Fsync; f != nil {
		fmt.Fprintf(&b, "\nfsync (etcd's fio recipe): %d ops of %d B write + fdatasync into a fallocated file, %s in %s, %.0f writes/s\n",
			f.Ops, f.BlockSize, bytesize.Approx(int64(f.Ops)*int64(f.BlockSize)), formatSeconds(f.Elapsed), f.WritesPerSecond)
		latencyTable(&b, []string{"fdatasync", "write"}, []Latency{f.Fdatasync, f.Write})
	}
	if c := r.Commit; c != nil {
		b.WriteString(c.section())
		latencyTable(&b, []string{"commit"}, []Latency{c.Commit})
	}
	if rr := r.Randread; rr != nil {
		fmt.Fprintf(&b, "\nrandread: %d ops of %d B O_DIRECT read at random offsets, queue depth 1, in %s, %.0f reads/s\n",
			rr.Ops, RandreadBlock, formatSeconds(rr.Elapsed), rr.ReadsPerSecond)
		latencyTable(&b, []string{"read"}, []Latency{rr.Read})
	}
	if s := r.Seqread; s != nil {
		fmt.Fprintf(&b, "\nseqread: %s in %s O_DIRECT reads, %s inside the reads, %.1f MiB/s\n",
			bytesize.Approx(s.Bytes), bytesize.Approx(SeqreadBlock), formatSeconds(s.IO), s.BytesPerSecond/(1<<20))
	}
	if l := r.Load; l != nil {
		l.table(&b)
	}
	b.WriteString("\n")
	// One line per verdict, the WAL's then the backend's; the exit status is FAIL when
	// either is.
	switch f := r.Fsync; {
	case f == nil:
	case f.Verdict == Pass:
		fmt.Fprintf(&b, "PASS  fdatasync p99 %s < %s: good enough for etcd's WAL (etcd wants p99 wal_fsync under 10ms)\n",
			FormatDuration(f.Fdatasync.P99), r.Threshold)
	default:
		fmt.Fprintf(&b, "FAIL  fdatasync p99 %s >= %s: too slow for etcd's WAL (etcd wants p99 wal_fsync under 10ms)\n",
			FormatDuration(f.Fdatasync.P99), r.Threshold)
	}
	if c := r.Commit; c != nil {
		b.WriteString(c.verdictLine())
	}
	if r.Fsync == nil && r.Commit == nil {
		b.WriteString("no verdict: neither the fsync nor the commit probe ran (etcd's verdicts are on fdatasync and commit latency)\n")
	}
	if l := r.Load; l != nil {
		fmt.Fprintf(&b, "      %s\n", l.besideVerdict())
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "WARN  %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func deviceLine(d *Device) string {
	if d == nil {
		return "unknown (no block device found for the path)"
	}
	parts := []string{d.Name}
	if d.Disk != "" && d.Disk != d.Name {
		parts = append(parts, "on disk "+d.Disk)
	}
	if d.Model == "" {
		parts = append(parts, "model unknown")
	} else {
		parts = append(parts, fmt.Sprintf("model %q", d.Model))
	}
	if d.Rotational {
		parts = append(parts, "rotational")
	} else {
		parts = append(parts, "non-rotational")
	}
	return strings.Join(parts, ", ")
}

func latencyTable(b *strings.Builder, names []string, ls []Latency) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Right-aligned numbers under their headers, the names padded to the left.
	_, _ = fmt.Fprintf(tw, "  %-10s\tmin\tp50\tp90\tp99\tp99.9\tmax\tmean\tstddev\t\n", "latency")
	for i, l := range ls {
		_, _ = fmt.Fprintf(tw, "  %-10s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", names[i],
			FormatDuration(l.Min), FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99),
			FormatDuration(l.P999), FormatDuration(l.Max), FormatDuration(l.Mean), FormatDuration(l.Stddev))
	}
	_ = tw.Flush()
}

// FormatDuration writes a latency with three significant digits in the unit that suits
// it: 85.2µs, 3.49ms, 1.20s.
func FormatDuration(d time.Duration) string {
	var v float64
	var unit string
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		v, unit = float64(d)/float64(time.Microsecond), "µs"
	case d < time.Second:
		v, unit = float64(d)/float64(time.Millisecond), "ms"
	default:
		v, unit = d.Seconds(), "s"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f%s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
	return fmt.Sprintf("%.2f%s", v, unit)
}

// The JSON output, documented in docs/check.md. Field names are a stable interface:
// add, never rename. Durations are seconds.
type jsonReport struct {
	Profile          string     `json:"profile"`
	Path             string     `json:"path"`
	Device           *Device    `json:"device"`
	Verdict          Verdict    `json:"verdict"`
	ThresholdSeconds float64    `json:"threshold_seconds"`
	Probes           jsonProbes `json:"probes"`
	Load             *jsonLoad  `json:"load"`
	Warnings         []string   `json:"warnings"`
}

type jsonProbes struct {
	Fsync    *jsonFsync    `json:"fsync,omitempty"`
	Commit   *jsonCommit   `json:"commit,omitempty"`
	Randread *jsonRandread `json:"randread,omitempty"`
	Seqread  *jsonSeqread  `json:"seqread,omitempty"`
}

type jsonFsync struct {
	Ops              int     `json:"ops"`
	BlockSizeBytes   int     `json:"block_size_bytes"`
	DurationSeconds  float64 `json:"duration_seconds"`
	WritesPerSecond  float64 `json:"writes_per_second"`
	FdatasyncSeconds Latency `json:"fdatasync_seconds"`
	WriteSeconds     Latency `json:"write_seconds"`
	Verdict          Verdict `json:"verdict"`
}

type jsonRandread struct {
	Ops             int     `json:"ops"`
	BlockSizeBytes  int     `json:"block_size_bytes"`
	DurationSeconds float64 `json:"duration_seconds"`
	ReadsPerSecond  float64 `json:"reads_per_second"`
	ReadSeconds     Latency `json:"read_seconds"`
}

type jsonSeqread struct {
	Bytes           int64   `json:"bytes"`
	BlockSizeBytes  int     `json:"block_size_bytes"`
	DurationSeconds float64 `json:"duration_seconds"`
	BytesPerSecond  float64 `json:"bytes_per_second"`
}

// WriteJSON writes the report as one JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	out := jsonReport{
		Profile:          ProfileEtcd,
		Path:             r.Path,
		Device:           r.Device,
		Verdict:          r.Verdict,
		ThresholdSeconds: r.Threshold.Seconds(),
		Warnings:         r.Warnings,
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if f := r.Fsync; f != nil {
		out.Probes.Fsync = &jsonFsync{Ops: f.Ops, BlockSizeBytes: f.BlockSize, DurationSeconds: f.Elapsed.Seconds(),
			WritesPerSecond: f.WritesPerSecond, FdatasyncSeconds: f.Fdatasync, WriteSeconds: f.Write, Verdict: f.Verdict}
	}
	if c := r.Commit; c != nil {
		out.Probes.Commit = c.json()
	}
	if rr := r.Randread; rr != nil {
		out.Probes.Randread = &jsonRandread{Ops: rr.Ops, BlockSizeBytes: RandreadBlock, DurationSeconds: rr.Elapsed.Seconds(),
			ReadsPerSecond: rr.ReadsPerSecond, ReadSeconds: rr.Read}
	}
	if l := r.Load; l != nil {
		out.Load = l.json()
	}
	if s := r.Seqread; s != nil {
		out.Probes.Seqread = &jsonSeqread{Bytes: s.Bytes, BlockSizeBytes: SeqreadBlock, DurationSeconds: s.IO.Seconds(), BytesPerSecond: s.BytesPerSecond}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// DocumentedJSONFields is every field of the JSON output with all probes run, as paths
// of object keys (docs/check.md documents each).
var DocumentedJSONFields = func() [][]string {
	fields := [][]string{
		{"profile"}, {"path"}, {"device"}, {"device", "name"}, {"device", "disk"}, {"device", "model"}, {"device", "serial"}, {"device", "rotational"},
		{"verdict"}, {"threshold_seconds"}, {"warnings"},
		{"probes", "fsync", "ops"}, {"probes", "fsync", "block_size_bytes"}, {"probes", "fsync", "duration_seconds"}, {"probes", "fsync", "writes_per_second"},
		{"probes", "fsync", "verdict"},
		{"probes", "commit", "ops"}, {"probes", "commit", "pages_per_commit"}, {"probes", "commit", "page_size_bytes"}, {"probes", "commit", "file_size_bytes"},
		{"probes", "commit", "duration_seconds"}, {"probes", "commit", "commits_per_second"}, {"probes", "commit", "verdict"}, {"probes", "commit", "threshold_seconds"},
		{"probes", "randread", "ops"}, {"probes", "randread", "block_size_bytes"}, {"probes", "randread", "duration_seconds"}, {"probes", "randread", "reads_per_second"},
		{"probes", "seqread", "bytes"}, {"probes", "seqread", "block_size_bytes"}, {"probes", "seqread", "duration_seconds"}, {"probes", "seqread", "bytes_per_second"},
	}
	for _, lat := range [][]string{{"probes", "fsync", "fdatasync_seconds"}, {"probes", "fsync", "write_seconds"}, {"probes", "commit", "commit_seconds"}, {"probes", "randread", "read_seconds"}} {
		for _, stat := range []string{"min", "p50", "p90", "p99", "p99.9", "max", "mean", "stddev"} {
			fields = append(fields, append(append([]string{}, lat...), stat))
		}
	}
	return fields
}()
