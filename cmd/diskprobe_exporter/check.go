package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
)

// checkCommand is `diskprobe_exporter check PATH`.
type checkCommand struct {
	name      string
	path      *string
	probeDir  *string
	probes    *string
	size      *string
	blockSize *string
	duration  *time.Duration
	threshold *time.Duration
	json      *bool
	progress  *bool
}

// stuckGrace is how long an interrupted check waits for an I/O still in the kernel
// before it exits without having removed its files.
const stuckGrace = 10 * time.Second

func addCheckCommand(app *kingpin.Application) *checkCommand {
	cmd := app.Command("check", "Measure PATH once with etcd's fio recipe and give a PASS/FAIL verdict against etcd's targets. "+
		"Exit status: 0 PASS (or no verdict), 1 FAIL, 2 error.")
	return &checkCommand{
		name:      cmd.FullCommand(),
		path:      cmd.Arg("path", "Directory (or block device, read probes only) to measure.").Required().String(),
		probeDir:  cmd.Flag("probe-dir", "Write the check's files in this directory instead of PATH, which is then only stat'ed (it must be on PATH's filesystem): measure etcd's disk without writing inside /var/lib/etcd.").String(),
		probes:    cmd.Flag("probes", "Comma-separated probes to run: fsync, randread, seqread. Default: fsync on a directory, randread on a block device.").String(),
		size:      cmd.Flag("size", "Bytes the fsync job writes (fio --size).").Default(config.FormatSize(check.DefaultSize)).String(),
		blockSize: cmd.Flag("block-size", "Bytes per write of the fsync job (fio --bs; etcd's WAL entries average about 2300 B).").Default(fmt.Sprint(check.DefaultBlockSize)).String(),
		duration:  cmd.Flag("duration", "How long the randread probe reads.").Default(check.DefaultDuration.String()).Duration(),
		threshold: cmd.Flag("threshold", "PASS when the fdatasync p99 is under this (etcd: 10ms).").Default(check.DefaultThreshold.String()).Duration(),
		json:      cmd.Flag("json", "Print one JSON object on stdout instead of the summary.").Bool(),
		progress:  cmd.Flag("progress", "Show progress on stderr (a bar on a terminal, a line every 5s otherwise).").Default("true").Bool(),
	}
}

func (c *checkCommand) run(paths device.Paths) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "check: %v\n", err)
		return 2
	}
	size, err := config.ParseSize(*c.size)
	if err != nil {
		return fail(fmt.Errorf("--size: %w", err))
	}
	blockSize, err := config.ParseSize(*c.blockSize)
	if err != nil {
		return fail(fmt.Errorf("--block-size: %w", err))
	}
	if blockSize > config.MaxBlockSize {
		return fail(fmt.Errorf("--block-size: at most %s", config.FormatSize(config.MaxBlockSize)))
	}
	opts := check.Options{
		Path:      *c.path,
		ProbeDir:  *c.probeDir,
		Size:      size,
		BlockSize: int(blockSize),
		Duration:  *c.duration,
		Threshold: *c.threshold,
		Paths:     paths,
	}
	if *c.probes != "" {
		opts.Probes = strings.Split(*c.probes, ",")
	}
	if *c.progress {
		tty := isTerminal(os.Stderr)
		interval := 5 * time.Second
		if tty {
			interval = 200 * time.Millisecond
		}
		opts.Progress = check.NewProgress(os.Stderr, tty, interval)
	}

	// Ctrl-C or SIGTERM cancels the run; Run removes its files before it returns.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)

	type outcome struct {
		rep *check.Report
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := check.Run(ctx, opts)
		done <- outcome{rep, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case sig := <-signals:
		cancel(fmt.Errorf("%s", sigName(sig)))
		select {
		case o = <-done:
		case <-time.After(stuckGrace):
			// An I/O stuck in the kernel (a frozen filesystem, a dying disk) cannot be
			// cancelled; say what is left rather than hang.
			return fail(fmt.Errorf("interrupted by %s, but an I/O is still stuck in the kernel %s later; %s/%s* could not be removed yet", sigName(sig), stuckGrace, opts.Path, check.ScratchPrefix))
		case sig = <-signals:
			return fail(fmt.Errorf("interrupted twice (%s) while an I/O is still in the kernel; %s/%s* may be left behind", sigName(sig), opts.Path, check.ScratchPrefix))
		}
	}
	if o.err != nil {
		return fail(o.err)
	}
	if *c.json {
		err = o.rep.WriteJSON(os.Stdout)
	} else {
		err = o.rep.WriteText(os.Stdout)
	}
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		return fail(err)
	}
	return o.rep.ExitCode()
}

func sigName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		return unix.SignalName(s)
	}
	return sig.String()
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
