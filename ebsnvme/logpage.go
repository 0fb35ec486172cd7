// Package ebsnvme reads the statistics an Amazon EBS volume keeps about itself: the vendor
// log page 0xD0 of its NVMe controller, which says how long the volume spent over its own
// IOPS and throughput limits and over the instance's, its queue length, and device-side
// latency histograms. Parse decodes the page from the documented layout; Read asks the
// device for it with the NVMe admin passthrough ioctl. It has no Prometheus imports: the
// collector turns a Stats into metrics.
//
// The layout is AWS's, as its own tools read it (read 2026-11-29): the `stats` command of
// nvme-cli's amzn plugin (plugins/amzn/amzn-nvme.c, struct amzn_latency_log_page), the
// `ebsnvme stats` script of amazonlinux/amazon-ec2-utils (struct
// nvme_get_amzn_stats_logpage), and the EBS CSI driver's pkg/metrics/nvme.go. No code here
// has run against a real EBS volume: docs/volumes.md says what that leaves unchecked.
package ebsnvme

import (
	"encoding/binary"
	"fmt"
)

const (
	// LogPageID is the vendor-specific log page holding the statistics.
	LogPageID = 0xD0
	// Magic is the page's first 32-bit word on an EBS volume. (Instance-store volumes
	// answer the same page with another magic, 0xEC2C0D7E, and other meanings in the
	// exceeded fields; Parse refuses them.)
	Magic = 0x3C23B510
	// PageSize is the length of the page: every field AWS documents lies in it.
	PageSize = 4096
	// Model is what an EBS volume's NVMe controller reports as its model (sysfs
	// device/model, Identify Controller MN, trailing spaces trimmed).
	Model = "Amazon Elastic Block Store"
	// MaxBins is the number of bin slots in each histogram; the page's bin count says how
	// many are used.
	MaxBins = 64
)

// The documented layout, little-endian, packed. Offsets in bytes from the page's start.
const (
	offMagic = 0 // u32; the u32 at 4 is reserved (nvme-cli's newest layout calls it a version)

	offReadOps    = 8  // u64
	offWriteOps   = 16 // u64
	offReadBytes  = 24 // u64
	offWriteBytes = 32 // u64
	offReadTime   = 40 // u64, microseconds
	offWriteTime  = 48 // u64, microseconds

	offVolumeExceededIOPS       = 56 // u64, microseconds
	offVolumeExceededThroughput = 64 // u64, microseconds
	offInstanceExceededIOPS     = 72 // u64, microseconds
	offInstanceExceededTP       = 80 // u64, microseconds
	offQueueLength              = 88 // u64, point in time

	// 416 reserved bytes from 96, then the two histograms, then 496 reserved bytes.
	offReadHistogram  = 512
	offWriteHistogram = offReadHistogram + histogramSize

	// A histogram: num_bins (u64), then MaxBins bins of {lower u64, upper u64, count u32,
	// reserved u32}; bounds in microseconds.
	binSize       = 24
	histogramSize = 8 + MaxBins*binSize // 1544
)

// Stats is the page, decoded. Times are in microseconds, as the device counts them; every
// field but QueueLength is a cumulative counter.
type Stats struct {
	ReadOps, WriteOps       uint64
	ReadBytes, WriteBytes   uint64
	ReadMicros, WriteMicros uint64 // total time of the completed operations

	// How long demand exceeded each limit: the volume's provisioned IOPS and throughput,
	// and the EC2 instance's EBS IOPS and throughput.
	VolumeIOPSExceededMicros, VolumeThroughputExceededMicros     uint64
	InstanceIOPSExceededMicros, InstanceThroughputExceededMicros uint64

	QueueLength uint64 // operations waiting, when the page was read

	ReadLatency, WriteLatency Histogram
}

// Histogram is one of the device's latency histograms: its used bins, in order.
type Histogram struct{ Bins []Bin }

// Bin counts the operations whose latency fell between Lower and Upper microseconds.
type Bin struct {
	LowerMicros, UpperMicros uint64
	Count                    uint64
}

// Count is the operations in all bins.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, b := range h.Bins {
		n += b.Count
	}
	return n
}

// ShortPageError is a page shorter than the documented layout.
type ShortPageError struct{ Len int }

func (e *ShortPageError) Error() string {
	return fmt.Sprintf("EBS statistics log page 0x%X: %d bytes, the documented layout has %d", LogPageID, e.Len, PageSize)
}

// MagicError is a page whose first word is not the EBS magic: not an EBS volume's
// statistics (another vendor's page 0xD0, an instance-store volume's).
type MagicError struct{ Got uint32 }

func (e *MagicError) Error() string {
	return fmt.Sprintf("EBS statistics log page 0x%X: magic 0x%08X, not 0x%08X: not an EBS volume's statistics", LogPageID, e.Got, uint32(Magic))
}

// HistogramError is a histogram that does not fit the documented layout: more bins than
// there are slots, or bins whose upper bounds do not increase from bin to bin. Its counts cannot be turned
// into a cumulative histogram without guessing, so the page is refused.
type HistogramError struct {
	Direction string // "read" or "write"
	Bin       int    // -1 for the bin count
	Reason    string
}

func (e *HistogramError) Error() string {
	if e.Bin < 0 {
		return fmt.Sprintf("EBS statistics log page 0x%X: %s latency histogram: %s", LogPageID, e.Direction, e.Reason)
	}
	return fmt.Sprintf("EBS statistics log page 0x%X: %s latency histogram, bin %d: %s", LogPageID, e.Direction, e.Bin, e.Reason)
}

// Parse decodes the statistics page from its documented layout. It refuses a page shorter
// than PageSize, one without the EBS magic, and histograms that do not fit the layout;
// bytes past PageSize are ignored.
func Parse(page []byte) (Stats, error) {
	if len(page) < PageSize {
		return Stats{}, &ShortPageError{Len: len(page)}
	}
	le := binary.LittleEndian
	if m := le.Uint32(page[offMagic:]); m != Magic {
		return Stats{}, &MagicError{Got: m}
	}
	u64 := func(off int) uint64 { return le.Uint64(page[off:]) }
	s := Stats{
		ReadOps: u64(offReadOps), WriteOps: u64(offWriteOps),
		ReadBytes: u64(offReadBytes), WriteBytes: u64(offWriteBytes),
		ReadMicros: u64(offReadTime), WriteMicros: u64(offWriteTime),
		VolumeIOPSExceededMicros:         u64(offVolumeExceededIOPS),
		VolumeThroughputExceededMicros:   u64(offVolumeExceededThroughput),
		InstanceIOPSExceededMicros:       u64(offInstanceExceededIOPS),
		InstanceThroughputExceededMicros: u64(offInstanceExceededTP),
		QueueLength:                      u64(offQueueLength),
	}
	var err error
	if s.ReadLatency, err = parseHistogram(page[offReadHistogram:offReadHistogram+histogramSize], "read"); err != nil {
		return Stats{}, err
	}
	if s.WriteLatency, err = parseHistogram(page[offWriteHistogram:offWriteHistogram+histogramSize], "write"); err != nil {
		return Stats{}, err
	}
	return s, nil
}

func parseHistogram(b []byte, direction string) (Histogram, error) {
	le := binary.LittleEndian
	n := le.Uint64(b)
	if n > MaxBins {
		return Histogram{}, &HistogramError{Direction: direction, Bin: -1, Reason: fmt.Sprintf("%d bins, the layout has room for %d", n, MaxBins)}
	}
	h := Histogram{Bins: make([]Bin, n)}
	for i := range h.Bins {
		at := b[8+i*binSize:]
		bin := Bin{LowerMicros: le.Uint64(at), UpperMicros: le.Uint64(at[8:]), Count: uint64(le.Uint32(at[16:]))}
		if i > 0 && bin.UpperMicros <= h.Bins[i-1].UpperMicros {
			return Histogram{}, &HistogramError{Direction: direction, Bin: i, Reason: fmt.Sprintf("upper bound %d µs is not above the previous bin's %d µs", bin.UpperMicros, h.Bins[i-1].UpperMicros)}
		}
		h.Bins[i] = bin
	}
	return h, nil
}
