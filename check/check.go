// Package check is `diskprobe_exporter check PATH`: it measures a directory (or a block
// device, which is only ever read) once, with the probe package the daemon runs, in one
// of three profiles: etcd (etcd's fio recipe and its backend commit, each with a
// PASS/FAIL verdict against etcd's targets), sweep (block sizes from the logical block size to 64 MiB, random and
// sequential reads, at queue depth 1 and --iodepth) and randrw (random mixed I/O at a
// queue depth, as fio's randrw jobs) and first-write (first writes of a new file's blocks
// against rewrites, interval by interval, until stable: a cloud volume's warm-up).
package check

import (
	"fmt"
	"time"

	"github.com/diskprobe/diskprobe_exporter/config"
)

// Profiles, as --profile names them.
const (
	ProfileEtcd   = "etcd"
	ProfileSweep  = "sweep"
	ProfileRandRW = "randrw"
	// ProfileFirstWrite times first writes of fresh blocks against rewrites: a cloud
	// volume's warm-up.
	ProfileFirstWrite = "first-write"
)

// Profiles lists the profiles, the default first.
var Profiles = []string{ProfileEtcd, ProfileSweep, ProfileRandRW, ProfileFirstWrite}

// freeSpaceMargin is left free on top of what the check writes: a check must never be
// what fills the disk of a node that is already running something.
const freeSpaceMargin = 64 * config.MiB

// ScratchPrefix names the directory check creates in PATH for its files, removed at the end.
const ScratchPrefix = ".diskprobe-check-"

// Device is the block device the measured path lives on.
type Device struct {
	Name       string `json:"name"`
	Disk       string `json:"disk"`
	Model      string `json:"model"`
	Serial     string `json:"serial"`
	Rotational bool   `json:"rotational"`
}

// perSecond is a rate that JSON can carry: 0, not +Inf, for a zero duration.
func perSecond(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

func rate(n int64, elapsed time.Duration) string {
	if elapsed <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)/elapsed.Seconds())
}
