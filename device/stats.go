package device

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/procfs/blockdevice"
)

// Stats are one read of a device's /proc/diskstats line. Counters are cumulative since boot;
// the collector works with the difference of two reads around a probe round.
type Stats struct {
	ReadIOs, WriteIOs, DiscardIOs, FlushIOs uint64        // completed
	ReadSectors, WriteSectors               uint64        // always 512-byte units, whatever the block size
	IOTicks                                 time.Duration // time the device had I/O in flight (field 10)
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
		}, nil
	}
	return Stats{}, fmt.Errorf("device %q not found in %s", name, filepath.Join(p.procFS(), "diskstats"))
}
