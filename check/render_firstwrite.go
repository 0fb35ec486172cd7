package check

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

// stableIOPS is the mean IOPS of the stable intervals that ended the run; 0 when it did
// not warm up.
func (rep *FirstWriteReport) stableIOPS() float64 {
	if rep.Verdict != WarmedUp {
		return 0
	}
	var sum float64
	for _, iv := range rep.Intervals[len(rep.Intervals)-stableIntervals:] {
		sum += iv.IOPS
	}
	return sum / stableIntervals
}

// WriteText writes the intervals, then the verdict and what it means for etcd's.
func (rep *FirstWriteReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "path:      %s\n", rep.Path)
	fmt.Fprintf(&b, "device:    %s\n", deviceLine(rep.Device))
	how := "O_DIRECT writes"
	if !rep.Direct {
		how = "writes each followed by fdatasync"
	}
	fmt.Fprintf(&b, "first-write: %s %s, one at a time, into a new %s file of its own, every other write to a block never written before; %d of its %d blocks written, in %s (bound %s)\n\n",
		bytesize.Exact(int64(rep.BlockSize)), how, bytesize.Approx(rep.FileSize), rep.Written, rep.Blocks, formatSeconds(rep.Elapsed), formatSeconds(rep.Runtime))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprint(tw, "  from\tIO/s\twrites\tfirst writes\tfirst-write mean\trewrite mean\t\n")
	for _, iv := range rep.Intervals {
		_, _ = fmt.Fprintf(tw, "  %s\t%.0f\t%d\t%d\t%s\t%s\t\n", formatSeconds(iv.Start), iv.IOPS, iv.Ops, iv.FirstWrites, meanText(iv.FirstWriteMean), meanText(iv.RewriteMean))
	}
	_ = tw.Flush()
	b.WriteString("\n")
	b.WriteString(rep.verdictLines())
	for _, warn := range rep.Warnings {
		fmt.Fprintf(&b, "WARN  %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func meanText(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return FormatDuration(d)
}

func (rep *FirstWriteReport) verdictLines() string {
	penalty := fmt.Sprintf("first writes were %.0f%% slower than rewrites (mean %s against %s)", 100*rep.Penalty, meanText(rep.FirstMean), meanText(rep.RewriteMean))
	switch {
	case rep.FirstMean == 0 || rep.RewriteMean == 0:
		penalty = "first writes and rewrites could not both be timed"
	case rep.Penalty < penaltyFloor:
		penalty = fmt.Sprintf("no first-write penalty: first writes within %.0f%% of rewrites (mean %s against %s)", 100*penaltyFloor, meanText(rep.FirstMean), meanText(rep.RewriteMean))
	}
	switch {
	case rep.Verdict == WarmedUp && rep.Penalty < penaltyFloor:
		return fmt.Sprintf("WARMED UP   IOPS stable at ~%s from %s; %s: the etcd verdict (--profile=etcd) holds as it is\n",
			roundIOPS(rep.stableIOPS()), formatSeconds(rep.WarmedUpAt), penalty)
	case rep.Verdict == WarmedUp:
		return fmt.Sprintf("WARMED UP   after %s: IOPS stable at ~%s once every block of the file had been written; %s\n"+
			"            a fresh volume pays this on each block until it has been written once (etcd's fsync job and new WAL files write fresh blocks): take the etcd verdict (--profile=etcd) after warm-up, on a volume written once in full\n",
			formatSeconds(rep.WarmedUpAt), roundIOPS(rep.stableIOPS()), penalty)
	}
	return fmt.Sprintf("WARMING UP  IOPS not yet stable after %s (%d of %d blocks of the file written once); %s\n"+
		"            take the etcd verdict (--profile=etcd) only after warm-up: now it would hold neither before nor after (rerun with a larger --runtime or a smaller --file-size)\n",
		formatSeconds(rep.Elapsed), rep.Written, rep.Blocks, penalty)
}

// The first-write profile's JSON, documented in docs/check.md: add fields, never rename.
type jsonWriteInterval struct {
	StartSeconds          float64 `json:"start_seconds"`
	DurationSeconds       float64 `json:"duration_seconds"`
	Ops                   int     `json:"ops"`
	FirstWrites           int     `json:"first_writes"`
	IOPS                  float64 `json:"iops"`
	FirstWriteMeanSeconds float64 `json:"first_write_mean_seconds"`
	RewriteMeanSeconds    float64 `json:"rewrite_mean_seconds"`
}

type jsonFirstWrite struct {
	Profile               string              `json:"profile"`
	Path                  string              `json:"path"`
	Device                *Device             `json:"device"`
	BlockSizeBytes        int                 `json:"block_size_bytes"`
	FileSizeBytes         int64               `json:"file_size_bytes"`
	DirectIO              bool                `json:"direct_io"`
	IntervalSeconds       float64             `json:"interval_seconds"`
	MaxDurationSeconds    float64             `json:"max_duration_seconds"`
	DurationSeconds       float64             `json:"duration_seconds"`
	Blocks                int                 `json:"blocks"`
	BlocksWritten         int                 `json:"blocks_written"`
	Intervals             []jsonWriteInterval `json:"intervals"`
	Verdict               string              `json:"verdict"`
	WarmedUpAfterSeconds  *float64            `json:"warmed_up_after_seconds"`
	StableIOPS            *float64            `json:"stable_iops"`
	FirstWriteMeanSeconds float64             `json:"first_write_mean_seconds"`
	RewriteMeanSeconds    float64             `json:"rewrite_mean_seconds"`
	FirstWritePenalty     float64             `json:"first_write_penalty"`
	Warnings              []string            `json:"warnings"`
}

// WriteJSON writes the run as one JSON object and a newline.
func (rep *FirstWriteReport) WriteJSON(w io.Writer) error {
	out := jsonFirstWrite{Profile: ProfileFirstWrite, Path: rep.Path, Device: rep.Device, BlockSizeBytes: rep.BlockSize, FileSizeBytes: rep.FileSize,
		DirectIO: rep.Direct, IntervalSeconds: rep.Interval.Seconds(), MaxDurationSeconds: rep.Runtime.Seconds(), DurationSeconds: rep.Elapsed.Seconds(),
		Blocks: rep.Blocks, BlocksWritten: rep.Written, Intervals: []jsonWriteInterval{}, Verdict: rep.Verdict,
		FirstWriteMeanSeconds: rep.FirstMean.Seconds(), RewriteMeanSeconds: rep.RewriteMean.Seconds(), FirstWritePenalty: rep.Penalty,
		Warnings: rep.Warnings}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	for _, iv := range rep.Intervals {
		out.Intervals = append(out.Intervals, jsonWriteInterval{StartSeconds: iv.Start.Seconds(), DurationSeconds: iv.Elapsed.Seconds(), Ops: iv.Ops,
			FirstWrites: iv.FirstWrites, IOPS: iv.IOPS, FirstWriteMeanSeconds: iv.FirstWriteMean.Seconds(), RewriteMeanSeconds: iv.RewriteMean.Seconds()})
	}
	if rep.Verdict == WarmedUp {
		at, iops := rep.WarmedUpAt.Seconds(), rep.stableIOPS()
		out.WarmedUpAfterSeconds, out.StableIOPS = &at, &iops
	}
	return writeJSON(w, out)
}

// DocumentedFirstWriteJSONFields is every field of the first-write output, as paths of
// object keys (an interval's keys under "intervals"); docs/check.md documents each.
var DocumentedFirstWriteJSONFields = withDevice([][]string{
	{"profile"}, {"block_size_bytes"}, {"file_size_bytes"}, {"direct_io"}, {"interval_seconds"}, {"max_duration_seconds"}, {"duration_seconds"},
	{"blocks"}, {"blocks_written"},
	{"intervals", "start_seconds"}, {"intervals", "duration_seconds"}, {"intervals", "ops"}, {"intervals", "first_writes"}, {"intervals", "iops"},
	{"intervals", "first_write_mean_seconds"}, {"intervals", "rewrite_mean_seconds"},
	{"verdict"}, {"warmed_up_after_seconds"}, {"stable_iops"}, {"first_write_mean_seconds"}, {"rewrite_mean_seconds"}, {"first_write_penalty"}, {"warnings"},
})
