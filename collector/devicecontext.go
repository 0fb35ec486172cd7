package collector

import (
	"sync"
	"time"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// minContextWindow is the least time between our I/O that a device context value covers:
// the gap between two units of a target can be microseconds (its fsync round, then its
// randread round), where one stray I/O reads as thousands per second.
const minContextWindow = time.Second

// disk is one disk, shared by every target on it: its lock, which a target's worker holds
// around each unit of its I/O so that probes on the disk never overlap, and its device
// context. The prober's own I/O on the disk happens only inside units, so what the
// counters move between units is others' I/O. This has to be kept per disk, not per
// target: a target's own gaps contain the rounds of the other targets on the disk, which
// are the prober's too. Only the holder of lock touches the other fields.
//
// What of ours still lands in the gaps, measured on a loop-mounted ext4 with the fsync and
// randread probes at 1 s: not journal commits (fdatasync waits for the commit of its
// extent conversion, so it falls inside the unit), but the flusher writing back the
// filesystem metadata our writes dirtied, about one 1 KiB write every 30 s
// (dirty_expire_centisecs), and ~8 once after the read probe file is prepared: other_iops
// blips of 0.5–8 on 1 s windows, ~0.07 at the default 15 s intervals, busy_ratio 0. It
// cannot be told from others' metadata without tracing, so it is left in.
type disk struct {
	lock   chan struct{}
	names  map[string]bool         // the device names of the disk's targets (a partition and its disk count apart)
	ended  time.Time               // end of the last unit; zero before the first
	atEnd  map[string]device.Stats // each device's counters then
	others map[string]device.Stats // each device's I/O by others, summed over the gaps between units
	idle   time.Duration           // the gaps' total length
}

func newDisk() *disk {
	return &disk{lock: make(chan struct{}, 1), names: map[string]bool{}, atEnd: map[string]device.Stats{}, others: map[string]device.Stats{}}
}

// disks are the disks of a Scheduler's targets, by diskKey; kept across reloads.
type disks struct {
	mu    sync.Mutex // workers look a disk up when their path answers late
	byKey map[string]*disk
}

func (ds *disks) get(key string) *disk {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d, ok := ds.byKey[key]
	if !ok {
		d = newDisk()
		ds.byKey[key] = d
	}
	return d
}

// unitStarts closes the gap that ends now: its I/O was others'. It returns the counters
// of the device name read now (ok false when they could not be read), for the device's
// ceiling, which counts everyone's I/O.
func (d *disk) unitStarts(paths device.Paths, name string, now time.Time) (stats device.Stats, ok bool) {
	d.names[name] = true
	if !d.ended.IsZero() {
		d.idle += now.Sub(d.ended)
	}
	for n, end := range d.atEnd {
		s, err := paths.ReadStats(n)
		if err != nil {
			continue
		}
		if n == name {
			stats, ok = s, true
		}
		if !s.After(end) {
			continue // re-created (a loop device re-attached): no figure for this gap
		}
		d.others[n] = d.others[n].Add(s.Sub(end))
	}
	if !ok { // the first unit on the disk, or the device is new to it
		s, err := paths.ReadStats(name)
		stats, ok = s, err == nil
	}
	return stats, ok
}

// unitEnded opens a gap at now.
func (d *disk) unitEnded(paths device.Paths, now time.Time) {
	clear(d.atEnd)
	for n := range d.names {
		if s, err := paths.ReadStats(n); err == nil {
			d.atEnd[n] = s
		}
	}
	d.ended = now
}

// contextMark is where a target last published its device context.
type contextMark struct {
	set    bool
	others device.Stats
	idle   time.Duration
}

// since is others' I/O on the device name and the length of the gaps since mark, and
// moves mark to now when the gaps add up to minContextWindow.
func (d *disk) since(mark *contextMark, name string) (device.Stats, time.Duration, bool) {
	others := d.others[name]
	if !mark.set {
		*mark = contextMark{set: true, others: others, idle: d.idle}
		return device.Stats{}, 0, false
	}
	wall := d.idle - mark.idle
	if wall < minContextWindow {
		return device.Stats{}, 0, false
	}
	delta := others.Sub(mark.others)
	*mark = contextMark{set: true, others: others, idle: d.idle}
	return delta, wall, true
}
