// Package bytesize writes byte counts for people: the one formatter of the config's sizes,
// check's reports and its progress lines.
package bytesize

import (
	"fmt"
	"strings"
)

var units = []struct {
	name  string
	bytes int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// Exact writes n in the largest binary unit that divides it: "4 KiB", "64 MiB", "2300 B".
func Exact(n int64) string {
	for _, u := range units {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d %s", n/u.bytes, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Approx writes n to one decimal in the largest binary unit not above it: "22.0 MiB",
// "148.2 KiB", "512 B".
func Approx(n int64) string {
	for _, u := range units {
		if n >= u.bytes {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.bytes), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Config writes n the way the configuration takes it: Exact without its space or a bare
// B, "4KiB", "2300", which config.ParseSize reads back.
func Config(n int64) string {
	return strings.ReplaceAll(strings.TrimSuffix(Exact(n), " B"), " ", "")
}
