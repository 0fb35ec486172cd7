package check

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/diskprobe/diskprobe_exporter/internal/bytesize"
)

// mbps is decimal megabytes a second, as fio's "(… MB/s)" and the iops tool print them.
func mbps(bytesPerSecond float64) string {
	v := bytesPerSecond / 1e6
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func (s Source) describe() string {
	if s.Type == "device" {
		return fmt.Sprintf("the whole device (%s), opened read-only", bytesize.Approx(s.Bytes))
	}
	return fmt.Sprintf("a %s file of its own, written in full first", bytesize.Approx(s.Bytes))
}

// jobHeader writes what was measured, as the etcd profile's summary starts.
func jobHeader(b *strings.Builder, path string, dev *Device, label string, src Source) {
	fmt.Fprintf(b, "path:      %s\n", path)
	fmt.Fprintf(b, "device:    %s\n", deviceLine(dev))
	fmt.Fprintf(b, "%-10s %s\n", label, src.describe())
}

// WriteText writes one table per pattern, a row per block size, depth 1 and the deep
// queue side by side: where IO/s stop growing with the block size and MB/s take over is
// where the volume's IOPS cap ends and its bandwidth cap begins.
func (rep *SweepReport) WriteText(w io.Writer) error {
	var b strings.Builder
	jobHeader(&b, rep.Path, rep.Device, "read:", rep.Source)
	fmt.Fprintf(&b, "sweep:     %d cells of %s O_DIRECT reads, queue depth 1 and %d, in %s (advertised %s)\n",
		len(rep.Cells), rep.Runtime, rep.Depth, formatSeconds(rep.Elapsed), formatSeconds(rep.Advertised))
	depths := []int{1}
	if rep.Depth > 1 {
		depths = append(depths, rep.Depth)
	}
	for _, p := range []Pattern{Random, Sequential} {
		fmt.Fprintf(&b, "\n%s read\n", p)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		_, _ = fmt.Fprint(tw, "  block\t")
		for _, d := range depths {
			_, _ = fmt.Fprintf(tw, "QD%d IO/s\tMB/s\tp50\tp99\t", d)
		}
		_, _ = fmt.Fprintln(tw)
		for _, bs := range rep.blockSizes() {
			_, _ = fmt.Fprintf(tw, "  %s\t", bytesize.Exact(int64(bs)))
			for _, d := range depths {
				c, ok := rep.cell(bs, p, d)
				if !ok {
					_, _ = fmt.Fprint(tw, "-\t-\t-\t-\t")
					continue
				}
				_, _ = fmt.Fprintf(tw, "%.0f\t%s\t%s\t%s\t", c.IOPS, mbps(c.BytesPerSecond), FormatDuration(c.P50), FormatDuration(c.P99))
			}
			_, _ = fmt.Fprintln(tw)
		}
		_ = tw.Flush()
	}
	if c := rep.Ceiling; c != nil {
		fmt.Fprintf(&b, "\nCEILING  %s\n", c.sentence())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (rep *SweepReport) blockSizes() []int {
	var out []int
	for _, c := range rep.Cells {
		if len(out) == 0 || out[len(out)-1] != c.BlockSize {
			out = append(out, c.BlockSize)
		}
	}
	return out
}

func (rep *SweepReport) cell(bs int, p Pattern, depth int) (Cell, bool) {
	for _, c := range rep.Cells {
		if c.BlockSize == bs && c.Pattern == p && c.Depth == depth {
			return c, true
		}
	}
	return Cell{}, false
}

// WriteText writes fio's two sides of a mixed job.
func (rep *RandRWReport) WriteText(w io.Writer) error {
	var b strings.Builder
	jobHeader(&b, rep.Path, rep.Device, "on:", rep.Source)
	fmt.Fprintf(&b, "randrw:    %s O_DIRECT I/O at random offsets, %d%% reads, queue depth %d, for %s\n\n",
		bytesize.Exact(int64(rep.BlockSize)), rep.ReadMix, rep.Depth, formatSeconds(rep.Elapsed))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprint(tw, "  \tops\tIO/s\tMB/s\tmin\tp50\tp90\tp99\tp99.9\tmax\t\n")
	for _, side := range []struct {
		name string
		d    Direction
	}{{"read", rep.Read}, {"write", rep.Write}} {
		l := side.d.Latency
		_, _ = fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", side.name, side.d.Ops, side.d.IOPS, mbps(side.d.BytesPerSecond),
			FormatDuration(l.Min), FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.P999), FormatDuration(l.Max))
	}
	_ = tw.Flush()
	if ref := rep.Reference; ref != nil {
		total := rep.Read.IOPS + rep.Write.IOPS
		fmt.Fprintf(&b, "\nqueue depth 1 (the reference, %s first): %.0f IO/s, reads and writes together; queue depth %d: %.0f\n",
			formatSeconds(ref.Elapsed), ref.IOPS, rep.Depth, total)
		if rep.Flat {
			fmt.Fprintf(&b, "FLAT  IOPS grew only %.1f× from queue depth 1: a ceiling at ~%s (provisioned or throttled) or the device's own limit reached at depth 1; --profile=sweep tells them apart\n",
				rep.Gain, roundIOPS(total))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// The JSON of the sweep and randrw profiles, documented in docs/check.md: add fields,
// never rename them. Durations are seconds, rates per second, sizes bytes.
type jsonSource struct {
	Type  string `json:"kind"` // a contract (docs/check.md): the key stays "kind"
	Bytes int64  `json:"bytes"`
}

type jsonCell struct {
	BlockSizeBytes  int     `json:"block_size_bytes"`
	Pattern         Pattern `json:"pattern"`
	IODepth         int     `json:"iodepth"`
	Ops             int     `json:"ops"`
	DurationSeconds float64 `json:"duration_seconds"`
	IOPS            float64 `json:"iops"`
	BytesPerSecond  float64 `json:"bytes_per_second"`
	P50Seconds      float64 `json:"p50_seconds"`
	P99Seconds      float64 `json:"p99_seconds"`
}

type jsonSweep struct {
	Profile               string       `json:"profile"`
	Path                  string       `json:"path"`
	Device                *Device      `json:"device"`
	Source                jsonSource   `json:"source"`
	IODepth               int          `json:"iodepth"`
	RuntimePerCellSeconds float64      `json:"runtime_per_cell_seconds"`
	AdvertisedSeconds     float64      `json:"advertised_seconds"`
	DurationSeconds       float64      `json:"duration_seconds"`
	Cells                 []jsonCell   `json:"cells"`
	Ceiling               *jsonCeiling `json:"ceiling"`
}

// jsonCeiling is a recognised IOPS ceiling; null when none is shown.
type jsonCeiling struct {
	IOPS              float64 `json:"iops"`
	FromIODepth       int     `json:"from_iodepth"`
	MinBlockSizeBytes int     `json:"min_block_size_bytes"`
	MaxBlockSizeBytes int     `json:"max_block_size_bytes"`
}

func (c *Ceiling) json() *jsonCeiling {
	if c == nil {
		return nil
	}
	return &jsonCeiling{IOPS: c.IOPS, FromIODepth: c.FromQD, MinBlockSizeBytes: c.MinBlock, MaxBlockSizeBytes: c.MaxBlock}
}

// WriteJSON writes the sweep as one JSON object and a newline.
func (rep *SweepReport) WriteJSON(w io.Writer) error {
	out := jsonSweep{Profile: ProfileSweep, Path: rep.Path, Device: rep.Device, Source: jsonSource(rep.Source), IODepth: rep.Depth,
		RuntimePerCellSeconds: rep.Runtime.Seconds(), AdvertisedSeconds: rep.Advertised.Seconds(), DurationSeconds: rep.Elapsed.Seconds(),
		Cells: []jsonCell{}}
	for _, c := range rep.Cells {
		out.Cells = append(out.Cells, jsonCell{BlockSizeBytes: c.BlockSize, Pattern: c.Pattern, IODepth: c.Depth, Ops: c.Ops,
			DurationSeconds: c.Elapsed.Seconds(), IOPS: c.IOPS, BytesPerSecond: c.BytesPerSecond, P50Seconds: c.P50.Seconds(), P99Seconds: c.P99.Seconds()})
	}
	out.Ceiling = rep.Ceiling.json()
	return writeJSON(w, out)
}

type jsonDirection struct {
	Ops            int     `json:"ops"`
	Bytes          int64   `json:"bytes"`
	IOPS           float64 `json:"iops"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	LatencySeconds Latency `json:"latency_seconds"`
}

type jsonRandRW struct {
	Profile         string         `json:"profile"`
	Path            string         `json:"path"`
	Device          *Device        `json:"device"`
	Source          jsonSource     `json:"source"`
	BlockSizeBytes  int            `json:"block_size_bytes"`
	IODepth         int            `json:"iodepth"`
	RWMixRead       int            `json:"rwmixread"`
	DurationSeconds float64        `json:"duration_seconds"`
	Read            jsonDirection  `json:"read"`
	Write           jsonDirection  `json:"write"`
	Reference       *jsonReference `json:"reference"`
	QueueGain       *float64       `json:"queue_gain"`
	Flat            bool           `json:"flat"`
}

// jsonReference is randrw's run at queue depth 1; null at --iodepth=1.
type jsonReference struct {
	IODepth         int     `json:"iodepth"`
	Ops             int     `json:"ops"`
	DurationSeconds float64 `json:"duration_seconds"`
	IOPS            float64 `json:"iops"`
}

// WriteJSON writes the job as one JSON object and a newline.
func (rep *RandRWReport) WriteJSON(w io.Writer) error {
	dir := func(d Direction) jsonDirection {
		return jsonDirection{Ops: d.Ops, Bytes: d.Bytes, IOPS: d.IOPS, BytesPerSecond: d.BytesPerSecond, LatencySeconds: d.Latency}
	}
	out := jsonRandRW{Profile: ProfileRandRW, Path: rep.Path, Device: rep.Device, Source: jsonSource(rep.Source),
		BlockSizeBytes: rep.BlockSize, IODepth: rep.Depth, RWMixRead: rep.ReadMix, DurationSeconds: rep.Elapsed.Seconds(),
		Read: dir(rep.Read), Write: dir(rep.Write), Flat: rep.Flat}
	if ref := rep.Reference; ref != nil {
		out.Reference = &jsonReference{IODepth: 1, Ops: ref.Ops, DurationSeconds: ref.Elapsed.Seconds(), IOPS: ref.IOPS}
	}
	if rep.Gain > 0 {
		out.QueueGain = &rep.Gain
	}
	return writeJSON(w, out)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// DocumentedSweepJSONFields and DocumentedRandRWJSONFields are every field of those
// outputs, as paths of object keys (a cell's keys under "cells"); docs/check.md documents each.
var (
	DocumentedSweepJSONFields = withDevice([][]string{
		{"profile"}, {"source", "kind"}, {"source", "bytes"}, {"iodepth"}, {"runtime_per_cell_seconds"}, {"advertised_seconds"}, {"duration_seconds"},
		{"cells", "block_size_bytes"}, {"cells", "pattern"}, {"cells", "iodepth"}, {"cells", "ops"}, {"cells", "duration_seconds"},
		{"cells", "iops"}, {"cells", "bytes_per_second"}, {"cells", "p50_seconds"}, {"cells", "p99_seconds"},
		{"ceiling"}, {"ceiling", "iops"}, {"ceiling", "from_iodepth"}, {"ceiling", "min_block_size_bytes"}, {"ceiling", "max_block_size_bytes"},
	})
	DocumentedRandRWJSONFields = func() [][]string {
		f := withDevice([][]string{{"profile"}, {"source", "kind"}, {"source", "bytes"}, {"block_size_bytes"}, {"iodepth"}, {"rwmixread"}, {"duration_seconds"},
			{"reference"}, {"reference", "iodepth"}, {"reference", "ops"}, {"reference", "duration_seconds"}, {"reference", "iops"},
			{"queue_gain"}, {"flat"}})
		for _, side := range []string{"read", "write"} {
			for _, k := range []string{"ops", "bytes", "iops", "bytes_per_second"} {
				f = append(f, []string{side, k})
			}
			for _, stat := range []string{"min", "p50", "p90", "p99", "p99.9", "max", "mean", "stddev"} {
				f = append(f, []string{side, "latency_seconds", stat})
			}
		}
		return f
	}()
)

func withDevice(fields [][]string) [][]string {
	return append([][]string{{"path"}, {"device"}, {"device", "name"}, {"device", "disk"}, {"device", "model"}, {"device", "serial"}, {"device", "rotational"}}, fields...)
}
