package vantage

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Pressure is a PSI file's cumulative stall times (io.pressure, cpu.pressure,
// /proc/pressure/io): Some, time at least one task waited; Full, time all non-idle tasks
// did at once (HasFull: the file has the line; cpu.pressure of the host root lacks it on
// older kernels).
type Pressure struct {
	Some, Full time.Duration
	HasFull    bool
}

// ReadPressure reads a PSI file. Its total= fields are microseconds.
func ReadPressure(file string) (Pressure, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Pressure{}, err
	}
	var p Pressure
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var total time.Duration
		found := false
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return Pressure{}, fmt.Errorf("%s: %q is not a count of microseconds", file, f)
				}
				total, found = time.Duration(us)*time.Microsecond, true
			}
		}
		if !found {
			continue
		}
		switch fields[0] {
		case "some":
			p.Some, seen = total, true
		case "full":
			p.Full, p.HasFull = total, true
		}
	}
	if !seen {
		return Pressure{}, fmt.Errorf("%s has no \"some ... total=\" line", file)
	}
	return p, nil
}
