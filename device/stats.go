package device

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/procfs/blockdevice"
)

// Stats are one read of a device's /proc/diskstats line, or a sum or difference of reads.
// Counters are cumulative since boot; the collector sums, per disk, the differences across
// the gaps between its own units of I/O: what others did on the device.
type Stats struct {
	ReadIOs, WriteIOs, DiscardIOs, FlushIOs uint64        // completed
	ReadSectors, WriteSectors               uint64        // always 512-byte units, whatever the block size
	IOTicks                                 time.Duration // time the device had I/O in flight (field 10)
	// ReadTime, WriteTime, DiscardTime and FlushTime are the time requests of each kind
	// spent from issue to completion, summed over requests (fields 4, 8, 15 and 17): over a
	// window, divided by the requests of the kind, the device's own time per request.
	// QueueTime is field 11, the same sum over all kinds counted while it accrues: over a
	// window, divided by its length, the average number in flight. None counts the time a
	// bio waited above the device (a blkio throttle holds it there).
	ReadTime, WriteTime, DiscardTime, FlushTime, QueueTime time.Duration
}

// ReadStats reads the current counters of the named device (Info.Name) from <procfs>/diskstats.
func (p Paths) ReadStats(name string) (Stats, error) {
	fs, err := blockdevice.NewFS(p.procFS(), p.sysFS())
	if err != nil {
		return Stats{}, err
	}
	all, err := fs.ProcDiskstats()
	if err != nil {
		return Stats{}, fmt.Errorf("reading %s: %w", filepath.Join(p.procFS(), "diskstats"), err)
	}
	for _, d := range all {
		if d.DeviceName != name {
			continue
		}
		// Kernels before 4.18 have no discard fields and before 5.5 no flush fields; they stay 0.
		return Stats{
			ReadIOs:      d.ReadIOs,
			WriteIOs:     d.WriteIOs,
			DiscardIOs:   d.DiscardIOs,
			FlushIOs:     d.FlushRequestsCompleted,
			ReadSectors:  d.ReadSectors,
			WriteSectors: d.WriteSectors,
			IOTicks:      time.Duration(d.IOsTotalTicks) * time.Millisecond,
			ReadTime:     time.Duration(d.ReadTicks) * time.Millisecond,
			WriteTime:    time.Duration(d.WriteTicks) * time.Millisecond,
			DiscardTime:  time.Duration(d.DiscardTicks) * time.Millisecond,
			FlushTime:    time.Duration(d.TimeSpentFlushing) * time.Millisecond,
			QueueTime:    time.Duration(d.WeightedIOTicks) * time.Millisecond,
		}, nil
	}
	return Stats{}, fmt.Errorf("device %q not found in %s", name, filepath.Join(p.procFS(), "diskstats"))
}

// Sub is s minus earlier, field by field.
func (s Stats) Sub(earlier Stats) Stats {
	return Stats{
		ReadIOs: s.ReadIOs - earlier.ReadIOs, WriteIOs: s.WriteIOs - earlier.WriteIOs,
		DiscardIOs: s.DiscardIOs - earlier.DiscardIOs, FlushIOs: s.FlushIOs - earlier.FlushIOs,
		ReadSectors: s.ReadSectors - earlier.ReadSectors, WriteSectors: s.WriteSectors - earlier.WriteSectors,
		IOTicks:  s.IOTicks - earlier.IOTicks,
		ReadTime: s.ReadTime - earlier.ReadTime, WriteTime: s.WriteTime - earlier.WriteTime,
		DiscardTime: s.DiscardTime - earlier.DiscardTime, FlushTime: s.FlushTime - earlier.FlushTime,
		QueueTime: s.QueueTime - earlier.QueueTime,
	}
}

// Add is s plus o, field by field.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		ReadIOs: s.ReadIOs + o.ReadIOs, WriteIOs: s.WriteIOs + o.WriteIOs,
		DiscardIOs: s.DiscardIOs + o.DiscardIOs, FlushIOs: s.FlushIOs + o.FlushIOs,
		ReadSectors: s.ReadSectors + o.ReadSectors, WriteSectors: s.WriteSectors + o.WriteSectors,
		IOTicks:  s.IOTicks + o.IOTicks,
		ReadTime: s.ReadTime + o.ReadTime, WriteTime: s.WriteTime + o.WriteTime,
		DiscardTime: s.DiscardTime + o.DiscardTime, FlushTime: s.FlushTime + o.FlushTime,
		QueueTime: s.QueueTime + o.QueueTime,
	}
}

// After reports whether no counter of s is below earlier's: both are reads of one device,
// not of a device re-created (a loop device re-attached) in between.
func (s Stats) After(earlier Stats) bool {
	return s.ReadIOs >= earlier.ReadIOs && s.WriteIOs >= earlier.WriteIOs && s.DiscardIOs >= earlier.DiscardIOs &&
		s.FlushIOs >= earlier.FlushIOs && s.ReadSectors >= earlier.ReadSectors && s.WriteSectors >= earlier.WriteSectors &&
		s.IOTicks >= earlier.IOTicks && s.ReadTime >= earlier.ReadTime && s.WriteTime >= earlier.WriteTime &&
		s.DiscardTime >= earlier.DiscardTime && s.FlushTime >= earlier.FlushTime && s.QueueTime >= earlier.QueueTime
}
