package bytesize

import "testing"

func TestExactAndApprox(t *testing.T) {
	for _, c := range []struct {
		n             int64
		exact, approx string
	}{
		{0, "0 B", "0 B"},
		{512, "512 B", "512 B"},
		{2300, "2300 B", "2.2 KiB"},
		{4 << 10, "4 KiB", "4.0 KiB"},
		{22 << 20, "22 MiB", "22.0 MiB"},
		{256<<20 + 4<<10, "262148 KiB", "256.0 MiB"},
		{3 << 30, "3 GiB", "3.0 GiB"},
	} {
		if got := Exact(c.n); got != c.exact {
			t.Errorf("Exact(%d) = %q, want %q", c.n, got, c.exact)
		}
		if got := Approx(c.n); got != c.approx {
			t.Errorf("Approx(%d) = %q, want %q", c.n, got, c.approx)
		}
	}
}
