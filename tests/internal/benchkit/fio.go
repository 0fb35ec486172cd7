package benchkit

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FioPercentiles are the percentiles asked of fio (its list holds at most 20): enough
// points for a CDF, and the p50 and p99 the goals are about.
var FioPercentiles = []float64{1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95, 99.99}

// FioResult is what one fio run reported.
type FioResult struct {
	Command   string                   // the command line as run
	Sync      map[string]time.Duration // sync (fdatasync) latency percentiles, by fio's key ("99.000000")
	SyncN     int                      // number of syncs
	Clat      map[string]time.Duration // read completion latency percentiles
	ReadIOs   int                      // reads done
	ReadBytes int64                    //
	ReadBW    float64                  // bytes per second over the job's runtime
	WriteIOs  int                      // writes done
	// With --lat_percentiles=1: submission-to-completion latency percentiles, what a
	// blocking pread measures whatever the engine.
	ReadLat, WriteLat   map[string]time.Duration
	ReadIOPS, WriteIOPS float64       // over the job's runtime
	WriteBW             float64       // bytes per second
	User, Sys           time.Duration // CPU of the whole fio process tree, from wait4
}

// Pct returns percentile p of m (fio's keys have six decimals).
func Pct(m map[string]time.Duration, p float64) time.Duration {
	return m[strconv.FormatFloat(p, 'f', 6, 64)]
}

// FioPercentileList is FioPercentiles as fio's --percentile_list value.
func FioPercentileList() string {
	parts := make([]string, len(FioPercentiles))
	for i, p := range FioPercentiles {
		parts[i] = strconv.FormatFloat(p, 'f', -1, 64)
	}
	return strings.Join(parts, ":")
}

// RunFio runs fio with args plus JSON output and the percentile list. With cgroupProcs
// set, fio joins that cgroup (by its cgroup.procs file) before it does any I/O.
func RunFio(workDir, cgroupProcs string, args ...string) (*FioResult, error) {
	out := filepath.Join(workDir, fmt.Sprintf("fio-%d.json", time.Now().UnixNano()))
	defer func() { _ = os.Remove(out) }()
	args = append(args, "--percentile_list="+FioPercentileList(), "--output-format=json")
	display := "fio " + strings.Join(args, " ")
	args = append(args, "--output="+out)
	var cmd *exec.Cmd
	if cgroupProcs != "" {
		// The shell moves itself into the cgroup and becomes fio, so fio and its job
		// processes start inside it.
		cmd = exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec fio "$@"`, cgroupProcs}, args...)...)
	} else {
		cmd = exec.Command("fio", args...)
	}
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", display, err, msg)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	r, err := parseFio(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", display, err)
	}
	r.Command = display
	r.User = time.Duration(ru.Utime.Nano())
	r.Sys = time.Duration(ru.Stime.Nano())
	return r, nil
}

type fioLat struct {
	N          int              `json:"N"`
	Percentile map[string]int64 `json:"percentile"`
}

type fioDir struct {
	IOBytes  int64   `json:"io_bytes"`
	IOPS     float64 `json:"iops"`
	BWBytes  float64 `json:"bw_bytes"`
	TotalIOs int     `json:"total_ios"`
	ClatNS   fioLat  `json:"clat_ns"`
	LatNS    fioLat  `json:"lat_ns"`
}

func parseFio(data []byte) (*FioResult, error) {
	// fio may print warnings before the JSON document.
	if i := strings.IndexByte(string(data), '{'); i > 0 {
		data = data[i:]
	}
	var doc struct {
		Jobs []struct {
			Error int    `json:"error"`
			Read  fioDir `json:"read"`
			Write fioDir `json:"write"`
			Sync  struct {
				LatNS fioLat `json:"lat_ns"`
			} `json:"sync"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parsing fio's JSON: %v", err)
	}
	if len(doc.Jobs) != 1 {
		return nil, fmt.Errorf("fio reported %d jobs, want 1", len(doc.Jobs))
	}
	j := doc.Jobs[0]
	if j.Error != 0 {
		return nil, fmt.Errorf("fio job error %d", j.Error)
	}
	conv := func(m map[string]int64) map[string]time.Duration {
		out := make(map[string]time.Duration, len(m))
		for k, v := range m {
			out[k] = time.Duration(v)
		}
		return out
	}
	return &FioResult{
		Sync: conv(j.Sync.LatNS.Percentile), SyncN: j.Sync.LatNS.N,
		Clat: conv(j.Read.ClatNS.Percentile), ReadIOs: j.Read.TotalIOs, ReadBytes: j.Read.IOBytes, ReadBW: j.Read.BWBytes,
		WriteIOs: j.Write.TotalIOs,
		ReadLat:  conv(j.Read.LatNS.Percentile), WriteLat: conv(j.Write.LatNS.Percentile),
		ReadIOPS: j.Read.IOPS, WriteIOPS: j.Write.IOPS, WriteBW: j.Write.BWBytes,
	}, nil
}

// FioVersion is `fio --version`.
func FioVersion() string {
	out, err := exec.Command("fio", "--version").Output()
	if err != nil {
		return "fio: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}
