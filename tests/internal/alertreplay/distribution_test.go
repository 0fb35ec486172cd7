package alertreplay

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A typo in a data file must name the file and line, not replay a wrong disk.
func TestBadDataFilesAreRejectedWithFileAndLine(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
		load             func(string) error
	}{
		{"bad.lat", "# header\n120.5\nfast\n", "bad.lat:3", loadLat},
		{"negative.lat", "120\n-3\n", "negative.lat:2", loadLat},
		{"empty.lat", "# only a header\n", "no latencies", loadLat},
		{"nohead.fio", "   |  1.00th=[  553],  5.00th=[  578]\n", "nohead.fio:1", loadFio},
		{"garbage.fio", "sync percentiles (usec):\n | 1.00th=[ 5], 5.00th=[ 6]\nnot a percentile line\n", "garbage.fio:3", loadFio},
		{"descending.fio", "sync percentiles (usec):\n | 1.00th=[ 50], 5.00th=[ 6]\n", "descending.fio:2", loadFio},
		{"over100.fio", "sync percentiles (usec):\n | 1.00th=[ 5], 101.00th=[ 6]\n", "over100.fio:2", loadFio},
		{"two.fio", "sync percentiles (usec):\n | 1.00th=[ 5], 5.00th=[ 6]\nclat percentiles (usec):\n", "two.fio:3", loadFio},
		{"one.fio", "sync percentiles (usec):\n | 1.00th=[ 5]\n", "fewer than two", loadFio},
	} {
		err := c.load(writeFile(t, c.name, c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

func loadLat(p string) error { _, err := LoadEmpirical(p); return err }
func loadFio(p string) error { _, err := LoadPercentileTable(p); return err }

// fio's percentiles, read back through the sampler, must give the same percentiles: a
// unit (usec vs nsec) or interpolation slip would move a whole disk across the 10 ms edge.
func TestPercentileTableSamplesItsOwnPercentiles(t *testing.T) {
	tab, err := LoadPercentileTable("testdata/published-ssd-ibm2019.fio")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	n, under := 200_000, map[float64]int{}
	edges := map[float64]float64{0.000783: 50, 0.002376: 99} // p50 and p99 of the table, in seconds
	for range n {
		s := tab.Sample(r)
		for e := range edges {
			if s <= e {
				under[e]++
			}
		}
	}
	for e, pct := range edges {
		got := 100 * float64(under[e]) / float64(n)
		if got < pct-0.5 || got > pct+0.5 {
			t.Errorf("share at or under %s: %.2f %%, the table says %.0f %%", seconds(e), got, pct)
		}
	}
}

// Every data file of the harness loads: a broken one would only show in make bench.
func TestEveryDataFileLoads(t *testing.T) {
	lib, err := LoadLibrary("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"synthetic-sata-ssd", "synthetic-nvme", "synthetic-raid-cache", "published-ssd-ibm2019",
		"published-hdd-etcd10273", "published-degraded-etcd12405", "host", "loop-20iops", "loop-50iops",
		"loop-100iops", "loop-100iops-competing", "loop-stalls"} {
		if lib[name] == nil {
			t.Errorf("testdata has no %s", name)
		}
	}
}
