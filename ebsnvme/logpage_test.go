package ebsnvme

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// pageBuilder writes a statistics page field by field at the offsets AWS documents (the
// layout of nvme-cli's struct amzn_latency_log_page, spelled out here as numbers rather
// than taken from the package's constants, so that a wrong constant fails the test).
type pageBuilder struct{ b []byte }

func newPage() *pageBuilder {
	p := &pageBuilder{b: make([]byte, 4096)}
	binary.LittleEndian.PutUint32(p.b[0:], 0x3C23B510)
	return p
}

func (p *pageBuilder) u32(off int, v uint32) *pageBuilder {
	binary.LittleEndian.PutUint32(p.b[off:], v)
	return p
}

func (p *pageBuilder) u64(off int, v uint64) *pageBuilder {
	binary.LittleEndian.PutUint64(p.b[off:], v)
	return p
}

// histogram writes a histogram at off: num_bins, then {lower u64, upper u64, count u32,
// reserved u32} per bin. The reserved word is filled with ones: it must not leak into the
// count.
func (p *pageBuilder) histogram(off int, bins ...Bin) *pageBuilder {
	p.u64(off, uint64(len(bins)))
	for i, b := range bins {
		at := off + 8 + 24*i
		p.u64(at, b.LowerMicros).u64(at+8, b.UpperMicros).u32(at+16, uint32(b.Count)).u32(at+20, 0xFFFFFFFF)
	}
	return p
}

const (
	readHistogramAt  = 512  // after 96 bytes of fields and 416 reserved
	writeHistogramAt = 2056 // 512 + 8 + 64*24
)

func TestParseReadsEveryFieldAtItsDocumentedOffset(t *testing.T) {
	read := []Bin{{0, 8, 3}, {8, 16, 40}, {16, 32, 7}, {32, 1 << 20, 1}}
	write := []Bin{{0, 16, 0}, {16, 128, 900}, {128, 4096, 12}}
	p := newPage().
		u32(4, 0xDEADBEEF). // reserved (a version in nvme-cli's newest layout): ignored
		u64(8, 101).u64(16, 102).
		u64(24, 103).u64(32, 104).
		u64(40, 105).u64(48, 106).
		u64(56, 107).u64(64, 108).
		u64(72, 109).u64(80, 110).
		u64(88, 111).
		histogram(readHistogramAt, read...).
		histogram(writeHistogramAt, write...)
	for i := 96; i < 512; i++ {
		p.b[i] = 0xAA // the reserved area between the counters and the histograms
	}
	got, err := Parse(p.b)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		ReadOps: 101, WriteOps: 102, ReadBytes: 103, WriteBytes: 104, ReadMicros: 105, WriteMicros: 106,
		VolumeIOPSExceededMicros: 107, VolumeThroughputExceededMicros: 108,
		InstanceIOPSExceededMicros: 109, InstanceThroughputExceededMicros: 110,
		QueueLength:  111,
		ReadLatency:  Histogram{Bins: read},
		WriteLatency: Histogram{Bins: write},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", got, want)
	}
	if n := got.WriteLatency.Count(); n != 912 {
		t.Errorf("write histogram count %d, want 912", n)
	}
}

// The last slot of the write histogram ends 496 bytes before the page does: a full
// histogram must be read from its slots, not past them.
func TestParseReadsAllSixtyFourBins(t *testing.T) {
	bins := make([]Bin, 64)
	for i := range bins {
		bins[i] = Bin{LowerMicros: uint64(i) * 10, UpperMicros: uint64(i+1) * 10, Count: uint64(i)}
	}
	p := newPage().histogram(writeHistogramAt, bins...)
	for i := 3600; i < 4096; i++ {
		p.b[i] = 0xAA
	}
	got, err := Parse(p.b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.WriteLatency.Bins, bins) {
		t.Errorf("64 bins parsed as %+v", got.WriteLatency.Bins)
	}
}

func TestParseRefusesAPageWithoutTheEBSMagic(t *testing.T) {
	for _, c := range []struct {
		name  string
		magic uint32
	}{{"zeroes", 0}, {"an instance-store volume's page", 0xEC2C0D7E}, {"byte-swapped", 0x10B5233C}} {
		p := newPage().u32(0, c.magic)
		_, err := Parse(p.b)
		var me *MagicError
		if !errors.As(err, &me) || me.Got != c.magic {
			t.Errorf("%s: %v, want a MagicError with 0x%08X", c.name, err, c.magic)
		}
	}
}

func TestParseRefusesAShortPage(t *testing.T) {
	p := newPage()
	for _, n := range []int{0, 4, 512, 4095} {
		_, err := Parse(p.b[:n])
		var se *ShortPageError
		if !errors.As(err, &se) || se.Len != n {
			t.Errorf("%d bytes: %v, want a ShortPageError", n, err)
		}
	}
	if _, err := Parse(append(p.b, 0, 0, 0, 0)); err != nil {
		t.Errorf("a page with bytes past the layout: %v", err)
	}
}

// A volume that has served no I/O yet: no bins used, or bins with nothing counted. Both
// are histograms of zero operations, not errors.
func TestParseTakesZeroHistograms(t *testing.T) {
	got, err := Parse(newPage().b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ReadLatency.Bins) != 0 || got.ReadLatency.Count() != 0 {
		t.Errorf("no bins parsed as %+v", got.ReadLatency)
	}
	empty := []Bin{{0, 100, 0}, {100, 1000, 0}}
	got, err = Parse(newPage().histogram(readHistogramAt, empty...).b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.ReadLatency.Bins, empty) || got.ReadLatency.Count() != 0 {
		t.Errorf("empty bins parsed as %+v", got.ReadLatency)
	}
}

func TestParseRefusesHistogramsOutsideTheLayout(t *testing.T) {
	tooMany := newPage().u64(writeHistogramAt, 65)
	_, err := Parse(tooMany.b)
	var he *HistogramError
	if !errors.As(err, &he) || he.Direction != "write" || he.Bin != -1 {
		t.Errorf("65 bins: %v, want a HistogramError on the write histogram's bin count", err)
	}
	unordered := newPage().histogram(readHistogramAt, Bin{0, 100, 1}, Bin{100, 50, 1})
	_, err = Parse(unordered.b)
	if !errors.As(err, &he) || he.Direction != "read" || he.Bin != 1 {
		t.Errorf("decreasing bounds: %v, want a HistogramError on read bin 1", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(newPage().histogram(readHistogramAt, Bin{0, 8, 1}).b)
	f.Add([]byte{0x10, 0xB5, 0x23, 0x3C})
	f.Fuzz(func(t *testing.T, page []byte) {
		s, err := Parse(page)
		if err != nil {
			return
		}
		for _, h := range []Histogram{s.ReadLatency, s.WriteLatency} {
			if len(h.Bins) > MaxBins {
				t.Fatalf("%d bins accepted", len(h.Bins))
			}
			for i := 1; i < len(h.Bins); i++ {
				if h.Bins[i].UpperMicros <= h.Bins[i-1].UpperMicros {
					t.Fatalf("bins out of order accepted: %+v", h.Bins)
				}
			}
		}
	})
}
