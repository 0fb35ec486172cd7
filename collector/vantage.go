package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/probe"
	"github.com/diskprobe/diskprobe_exporter/vantage"
)

// SkipNoVantage is the skip reason of a round of a target with a vantage whose process
// cannot be joined this round (gone, ambiguous, its cgroup refused): run from the
// exporter's own cgroup instead, it would measure another disk than the one it names.
const SkipNoVantage = "no_vantage"

// errNoVantage is what a round of a target with a vantage returns when its process could
// not be joined: the worker counts it skipped (SkipNoVantage), not failed.
var errNoVantage = errors.New("no vantage")

// vantageRun is a target's vantage (config.Vantage): the OS thread its probes' rounds run
// on, joined to the process's cgroup and I/O class again before each round, and where
// it stands, for scrapes. newRunner makes it; the worker alone calls its methods.
type vantageRun struct {
	config   config.Vantage
	resolver vantage.Resolver
	logger   *slog.Logger
	thread   *vantage.Thread // started by the first round
	logged   string          // the state last logged: one line per change

	// state is what scrapes read: nil before the first round.
	state atomic.Pointer[vantageState]
}

type vantageState struct {
	up   bool
	view vantage.View // when up
}

func newVantageRun(v *config.Vantage, paths device.Paths, logger *slog.Logger) *vantageRun {
	if v == nil {
		return nil
	}
	return &vantageRun{config: *v, logger: logger,
		resolver: vantage.Resolver{ProcFS: paths.ProcFS, Spec: vantage.Spec{Process: v.Process, PIDFile: v.PIDFile, Cgroup: v.Cgroup}}}
}

// wrap has p's rounds run on the vantage's thread; p as it is without a vantage.
func (v *vantageRun) wrap(p probe.Prober) probe.Prober {
	if v == nil {
		return p
	}
	return vantageProber{Prober: p, v: v}
}

// vantageProber runs a probe's rounds on its target's vantage thread, each after finding
// the process and joining where it stands now: never from where it stood before.
type vantageProber struct {
	probe.Prober
	v *vantageRun
}

func (p vantageProber) Round(ctx context.Context, env *probe.Env) (res probe.Result, err error) {
	if err := p.v.enter(); err != nil {
		return probe.Result{}, err
	}
	p.v.thread.Do(func() { res, err = p.Prober.Round(ctx, env) })
	return res, err
}

// enter finds the process and puts the thread where it stands, or says why it cannot
// (errNoVantage). A thread that cannot join leaves the cgroup it was in: it never holds
// the cgroup of a process it no longer follows, which could then not be removed.
func (v *vantageRun) enter() error {
	if v.thread == nil {
		v.thread = vantage.StartThread()
	}
	view, err := v.resolver.Resolve()
	if err == nil {
		err = v.thread.Join(view)
	}
	if err != nil {
		_ = v.thread.Leave()
		v.state.Store(&vantageState{})
		v.log(slog.LevelWarn, "no vantage: skipping the target's rounds until the process can be joined again", err.Error(), "vantage", v.config.What(), "err", err)
		return fmt.Errorf("%w: %v", errNoVantage, err)
	}
	v.state.Store(&vantageState{up: true, view: view})
	args := []any{"vantage", v.config.What(), "pid", view.PID, "cgroup", view.BlkioPath, "ioprio", view.IOPrio.String()}
	if _, err := vantage.ReadPressure(filepath.Join(view.UnifiedDir, "io.pressure")); view.UnifiedDir == "" || err != nil {
		reason := "no cgroup2 hierarchy is mounted"
		if err != nil && view.UnifiedDir != "" {
			reason = err.Error()
		}
		args = append(args, "pressure", "not exported: "+reason)
	}
	v.log(slog.LevelInfo, "probing from inside the process's cgroup and I/O class", fmt.Sprint(view.PID, view.BlkioPath, view.IOPrio), args...)
	return nil
}

// log logs msg when state differs from the last one logged.
func (v *vantageRun) log(level slog.Level, msg, state string, args ...any) {
	if state == v.logged {
		return
	}
	v.logged = state
	v.logger.Log(context.Background(), level, msg, args...)
}

// close ends the thread, once the round it may be running returns.
func (v *vantageRun) close() {
	if v != nil && v.thread != nil {
		v.thread.Stop()
	}
}

// vantageCollector reports, at scrape time, each vantage's state and the pressure its
// process's cgroup and the host report (PSI files: reading them never waits on a disk).
type vantageCollector struct {
	scheduler *Scheduler
	procfs    string

	info, up                      *prometheus.Desc
	ioWaiting, ioStalled, cpuWait *prometheus.Desc
	hostIOWaiting, hostIOStalled  *prometheus.Desc
}

func newVantageCollector() *vantageCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &vantageCollector{
		info: d("vantage_info", "Always 1 while the target's probes run inside another process's cgroup and I/O class (its vantage block): the cgroup joined (blkio, or the unified one on cgroup v2), the I/O priority taken (be/4, rt/0, idle, none), and the target probing the same disk from outside.",
			"target", "outside", "cgroup", "ioprio"),
		up:            d("vantage_up", "1 when the target's last round could join its vantage process's cgroup and I/O class, 0 when it could not (the process is gone or ambiguous, its cgroup refused the thread): its rounds are then skipped with reason no_vantage.", "target"),
		ioWaiting:     d("vantage_pressure_io_waiting_seconds_total", "Time at least one task of the vantage process's cgroup waited on I/O (its cgroup v2 io.pressure, some total).", "target"),
		ioStalled:     d("vantage_pressure_io_stalled_seconds_total", "Time all non-idle tasks of the vantage process's cgroup waited on I/O at once (its cgroup v2 io.pressure, full total).", "target"),
		cpuWait:       d("vantage_pressure_cpu_waiting_seconds_total", "Time at least one task of the vantage process's cgroup waited for a CPU (its cgroup v2 cpu.pressure, some total).", "target"),
		hostIOWaiting: d("host_pressure_io_waiting_seconds_total", "Time at least one task of the host waited on I/O (/proc/pressure/io, some total)."),
		hostIOStalled: d("host_pressure_io_stalled_seconds_total", "Time all non-idle tasks of the host waited on I/O at once (/proc/pressure/io, full total)."),
	}
}

func (c *vantageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.up, c.ioWaiting, c.ioStalled, c.cpuWait, c.hostIOWaiting, c.hostIOStalled} {
		ch <- d
	}
}

func (c *vantageCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if p, err := vantage.ReadPressure(hostPressureFile(c.procfs)); err == nil {
		counter(c.hostIOWaiting, p.Some.Seconds())
		if p.HasFull {
			counter(c.hostIOStalled, p.Full.Seconds())
		}
	}
	if c.scheduler == nil {
		return
	}
	for _, r := range c.scheduler.running() {
		if r.vantage == nil {
			continue
		}
		s := r.vantage.state.Load()
		if s == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, float64(boolInt(s.up)), r.name)
		if !s.up {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, r.name, r.vantage.config.Outside, s.view.BlkioPath, s.view.IOPrio.String())
		if dir := s.view.UnifiedDir; dir != "" {
			if p, err := vantage.ReadPressure(filepath.Join(dir, "io.pressure")); err == nil {
				counter(c.ioWaiting, p.Some.Seconds(), r.name)
				if p.HasFull {
					counter(c.ioStalled, p.Full.Seconds(), r.name)
				}
			}
			if p, err := vantage.ReadPressure(filepath.Join(dir, "cpu.pressure")); err == nil {
				counter(c.cpuWait, p.Some.Seconds(), r.name)
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hostPressureFile(procfs string) string {
	if procfs == "" {
		procfs = "/proc"
	}
	return filepath.Join(procfs, "pressure", "io")
}

// checkHostPressure logs, once at start, why the host's pressure is not exported.
func checkHostPressure(procfs string, logger *slog.Logger) {
	if _, err := vantage.ReadPressure(hostPressureFile(procfs)); err != nil {
		logger.Warn("diskprobe_host_pressure_* is not exported: this kernel reports no I/O pressure (PSI: CONFIG_PSI, or psi=0 on the kernel command line)", "err", err)
	}
}
