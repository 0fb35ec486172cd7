package collector

import (
	"errors"
	"log/slog"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/inspect"
)

// testRunner is a runner of a target taken as it is, without device context or a
// Scheduler, whose rounds hold lock: the same lock makes targets share one disk.
func testRunner(tg config.Target, lock chan struct{}, m *Metrics, clock Clock, logger *slog.Logger) *runner {
	d := newDisk()
	d.lock = lock
	sh := &shared{metrics: m, clock: clock, logger: logger, diskFor: func(string) *disk { return d }}
	return newRunner(sh, "test.yml", planned{parsed: tg, res: &inspect.Result{Target: tg, DeviceErr: errors.New("no disk in this test")}}, nil)
}
