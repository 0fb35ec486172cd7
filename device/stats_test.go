package device

import (
	"testing"
	"time"
)

func TestStatsArithmeticCoversEveryField(t *testing.T) {
	a := Stats{ReadIOs: 10, WriteIOs: 20, DiscardIOs: 30, FlushIOs: 40, ReadSectors: 50, WriteSectors: 60, IOTicks: 70 * time.Millisecond, ReadTime: 80 * time.Millisecond, WriteTime: 90 * time.Millisecond,
		DiscardTime: 100 * time.Millisecond, FlushTime: 110 * time.Millisecond, QueueTime: 120 * time.Millisecond}
	b := Stats{ReadIOs: 1, WriteIOs: 2, DiscardIOs: 3, FlushIOs: 4, ReadSectors: 5, WriteSectors: 6, IOTicks: 7 * time.Millisecond, ReadTime: 8 * time.Millisecond, WriteTime: 9 * time.Millisecond,
		DiscardTime: 10 * time.Millisecond, FlushTime: 11 * time.Millisecond, QueueTime: 12 * time.Millisecond}
	if got := a.Sub(b).Add(b); got != a {
		t.Errorf("(a-b)+b = %+v, want %+v", got, a)
	}
	if got, want := a.Sub(b), (Stats{9, 18, 27, 36, 45, 54, 63 * time.Millisecond, 72 * time.Millisecond, 81 * time.Millisecond,
		90 * time.Millisecond, 99 * time.Millisecond, 108 * time.Millisecond}); got != want {
		t.Errorf("a-b = %+v, want %+v", got, want)
	}
	if !a.After(b) || !a.After(a) {
		t.Error("a read with no counter lower must count as after")
	}
	// A device re-created between two reads: any one counter lower says so.
	for name, lower := range map[string]func(*Stats){
		"ReadIOs": func(s *Stats) { s.ReadIOs = 0 }, "WriteIOs": func(s *Stats) { s.WriteIOs = 0 },
		"DiscardIOs": func(s *Stats) { s.DiscardIOs = 0 }, "FlushIOs": func(s *Stats) { s.FlushIOs = 0 },
		"ReadSectors": func(s *Stats) { s.ReadSectors = 0 }, "WriteSectors": func(s *Stats) { s.WriteSectors = 0 },
		"IOTicks": func(s *Stats) { s.IOTicks = 0 }, "ReadTime": func(s *Stats) { s.ReadTime = 0 },
		"WriteTime": func(s *Stats) { s.WriteTime = 0 }, "DiscardTime": func(s *Stats) { s.DiscardTime = 0 },
		"FlushTime": func(s *Stats) { s.FlushTime = 0 }, "QueueTime": func(s *Stats) { s.QueueTime = 0 },
	} {
		c := a
		lower(&c)
		if c.After(a) {
			t.Errorf("%s lower than before, After said the read came later", name)
		}
	}
}
