package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/check"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/vantage"
)

// checkCommand is `diskprobe_exporter check PATH`.
type checkCommand struct {
	name      string
	profile   *string
	path      *string
	probeDir  *string
	probes    *string
	commits   *int
	size      *string
	blockSize *string
	duration  *time.Duration
	threshold *time.Duration
	json      *bool
	progress  *bool
	vantage   *string

	// etcd under load
	load          *bool
	loadReadIOPS  *int
	loadWriteIOPS *int
	loadBandwidth *string
	loadBlockSize *string

	// sweep and randrw
	iodepth   *int
	runtime   *time.Duration
	bs        *string
	rwmixread *int
	fileSize  *string
	interval  *time.Duration

	// which flags the user gave, to refuse those of another profile by name
	set map[string]*bool
}

// exitError is the exit status of an error, check's own or a usage error of any command:
// apart from 1, check's FAIL verdict.
const exitError = 2

// stuckGrace is how long an interrupted check waits for an I/O still in the kernel
// before it exits without having removed its files.
const stuckGrace = 10 * time.Second

func addCheckCommand(app *kingpin.Application) *checkCommand {
	cmd := app.Command("check", "Measure PATH once with the probe code the daemon runs. "+
		"--profile=etcd (default): etcd's fio recipe and its backend commit, each with a PASS/FAIL verdict against etcd's targets (fdatasync p99 under 10ms, commit p99 under 25ms). "+
		"--profile=sweep: O_DIRECT reads of every power-of-two block size from the logical block size to 64MiB, random and sequential, at queue depth 1 and --iodepth, IO/s, MB/s, p50 and p99 per cell. "+
		"--profile=randrw: random mixed reads and writes at --bs, --iodepth and --rwmixread, in a file of its own (a block device is only read, with --rwmixread=100). "+
		"--profile=first-write: a cloud volume's warm-up: writes into a new file of its own, first writes of never-written blocks against rewrites, IOPS every --interval until stable or --runtime, and whether the volume is still warming up. "+
		"Every profile removes its files on every exit, Ctrl-C included, and never writes to a block device. "+
		"Exit status: 0 PASS, or measured without a verdict (sweep, randrw, first-write, etcd without fsync and commit), 1 FAIL (etcd: either verdict), 2 error.")
	c := &checkCommand{name: cmd.FullCommand(), set: map[string]*bool{}}
	flag := func(name, help string) *kingpin.FlagClause {
		c.set[name] = new(bool)
		return cmd.Flag(name, help).IsSetByUser(c.set[name])
	}
	c.profile = cmd.Flag("profile", "What to measure: etcd, sweep, randrw or first-write.").Default(check.ProfileEtcd).String()
	c.path = cmd.Arg("path", "Directory (or block device, only ever read) to measure.").Required().String()
	c.probeDir = cmd.Flag("probe-dir", "Write the check's files in this directory instead of PATH, which is then only stat'ed (it must be on PATH's filesystem): measure etcd's disk without writing inside /var/lib/etcd.").String()
	c.probes = flag("probes", "etcd profile: comma-separated probes to run: fsync, commit, randread, seqread. Default: fsync and commit on a directory, randread on a block device.").String()
	c.commits = flag("commits", "etcd profile: commits of the commit job (etcd's backend commit: page writes at random offsets, fdatasync, meta page, fdatasync).").Default(fmt.Sprint(check.DefaultCommits)).Int()
	c.size = flag("size", "etcd profile: bytes the fsync job writes (fio --size).").Default(config.FormatSize(check.DefaultSize)).String()
	c.blockSize = flag("block-size", "etcd profile: bytes per write of the fsync job (fio --bs; etcd's WAL entries average about 2300 B).").Default(fmt.Sprint(check.DefaultBlockSize)).String()
	c.duration = flag("duration", "etcd profile: how long the randread probe reads.").Default(check.DefaultDuration.String()).Duration()
	c.threshold = flag("threshold", "etcd profile: PASS when the fdatasync p99 is under this (etcd: 10ms).").Default(check.DefaultThreshold.String()).Duration()
	c.load = flag("load", "etcd profile: run competing I/O in a file of its own while measuring (what an etcd member and its neighbours do to its disk), and report the load achieved beside the verdict.").Bool()
	c.loadReadIOPS = flag("load-read-iops", "etcd profile, with --load: random O_DIRECT reads per second of --load-block-size (0: none).").Default(fmt.Sprint(check.DefaultLoadReadIOPS)).Int()
	c.loadWriteIOPS = flag("load-write-iops", "etcd profile, with --load: random O_DIRECT writes per second of --load-block-size (0: none).").Default(fmt.Sprint(check.DefaultLoadWriteIOPS)).Int()
	c.loadBandwidth = flag("load-bandwidth", "etcd profile, with --load: bytes per second of sequential O_DIRECT writes in 1MiB blocks (0: none).").Default(config.FormatSize(check.DefaultLoadBandwidth)).String()
	c.loadBlockSize = flag("load-block-size", "etcd profile, with --load: bytes per read and per write of the random load.").Default(config.FormatSize(check.DefaultLoadBlockSize)).String()
	c.iodepth = flag("iodepth", "sweep, randrw: I/Os kept in flight (fio --iodepth); the sweep measures depth 1 and this one.").Default(fmt.Sprint(check.DefaultIODepth)).Int()
	c.runtime = flag("runtime", fmt.Sprintf("sweep: time per cell (default %s; a full sweep advertises its total before it starts); randrw: time of the job (default %s); first-write: the most it writes (default %s; it stops earlier once stable).", check.DefaultCellRuntime, check.DefaultRandRWRuntime, check.DefaultFirstWriteRuntime)).Duration()
	c.bs = flag("bs", fmt.Sprintf("randrw: bytes per I/O (fio --bs; default %s); first-write: bytes per write (default %s).", config.FormatSize(check.DefaultRandRWBlock), config.FormatSize(check.DefaultFirstWriteBlock))).String()
	c.rwmixread = flag("rwmixread", "randrw: percentage of reads (fio --rwmixread); 100 on a block device, which is never written.").Default(fmt.Sprint(check.DefaultRWMixRead)).Int()
	c.fileSize = flag("file-size", fmt.Sprintf("sweep, randrw on a directory: size of the file of their own, written in full before the first I/O (fio --size; default %s); first-write: size of the new file it writes (default %s).", config.FormatSize(check.DefaultJobFileSize), config.FormatSize(check.DefaultFirstWriteFileSize))).String()
	c.interval = flag("interval", "first-write: how often the IOPS are reported and checked for stability.").Default(check.DefaultFirstWriteInterval.String()).Duration()
	c.vantage = flag("vantage", "etcd profile: run the check twice, from the exporter's own cgroup and I/O class and from inside those of this process (a PID, or a name as /proc/PID/comm gives it: one process must have it), on a thread that joins its blkio cgroup (cgroup v1) and takes its I/O priority, as a target's vantage block does; print both and what the difference says. Needs root.").PlaceHolder("PID|NAME").String()
	c.json = cmd.Flag("json", "Print one JSON object on stdout instead of the summary.").Bool()
	c.progress = cmd.Flag("progress", "Show progress on stderr (a bar on a terminal, a line every 5s otherwise).").Default("true").Bool()
	return c
}

// profileFlags are the flags each profile reads; giving another profile's is an error.
var profileFlags = map[string][]string{
	check.ProfileEtcd:       {"probes", "size", "block-size", "duration", "threshold", "commits", "load", "load-read-iops", "load-write-iops", "load-bandwidth", "load-block-size", "vantage"},
	check.ProfileSweep:      {"iodepth", "runtime", "file-size"},
	check.ProfileRandRW:     {"iodepth", "runtime", "bs", "rwmixread", "file-size"},
	check.ProfileFirstWrite: {"runtime", "bs", "file-size", "interval"},
}

// report is what every profile prints.
type report interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
	ExitCode() int
}

func (c *checkCommand) run(paths device.Paths) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "check: %v\n", err)
		return exitError
	}
	if !slices.Contains(check.Profiles, *c.profile) {
		return fail(fmt.Errorf("--profile %q: one of %s", *c.profile, strings.Join(check.Profiles, ", ")))
	}
	for name, given := range c.set {
		if *given && !slices.Contains(profileFlags[*c.profile], name) {
			return fail(fmt.Errorf("--%s does not apply to --profile=%s", name, *c.profile))
		}
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
		Commits:   *c.commits,
		Paths:     paths,
	}
	if *c.probes != "" {
		opts.Probes = strings.Split(*c.probes, ",")
	}
	if opts.Load, err = c.loadOptions(); err != nil {
		return fail(err)
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

	measure, err := c.profileRun(opts)
	if err != nil {
		return fail(err)
	}
	type outcome struct {
		rep report
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := measure(ctx)
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
			return fail(fmt.Errorf("interrupted by %s, but an I/O is still stuck in the kernel %s later; %s could not be removed yet", sigName(sig), stuckGrace, scratchGlob(opts)))
		case sig = <-signals:
			return fail(fmt.Errorf("interrupted twice (%s) while an I/O is still in the kernel; %s may be left behind", sigName(sig), scratchGlob(opts)))
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

// loadOptions is --load and its --load-* flags; nil without --load.
func (c *checkCommand) loadOptions() (*check.LoadOptions, error) {
	if !*c.load {
		for _, name := range []string{"load-read-iops", "load-write-iops", "load-bandwidth", "load-block-size"} {
			if *c.set[name] {
				return nil, fmt.Errorf("--%s applies only with --load", name)
			}
		}
		return nil, nil
	}
	bw, err := config.ParseSize(*c.loadBandwidth)
	if err != nil {
		return nil, fmt.Errorf("--load-bandwidth: %w", err)
	}
	bs, err := config.ParseSize(*c.loadBlockSize)
	if err != nil {
		return nil, fmt.Errorf("--load-block-size: %w", err)
	}
	l := &check.LoadOptions{ReadIOPS: *c.loadReadIOPS, WriteIOPS: *c.loadWriteIOPS, Bandwidth: bw, BlockSize: int(min(bs, 1<<40))}
	return l, l.Validate()
}

// scratchGlob names the scratch directories a run of opts creates: in the probe directory
// when one is given (PATH is then only stat'ed), else in PATH.
func scratchGlob(opts check.Options) string {
	dir := opts.Path
	if opts.ProbeDir != "" {
		dir = opts.ProbeDir
	}
	return filepath.Join(dir, check.ScratchPrefix) + "*"
}

// profileRun is the run of the chosen profile, its flags parsed.
func (c *checkCommand) profileRun(etcd check.Options) (func(context.Context) (report, error), error) {
	// --file-size, --bs and --runtime default by profile.
	size := func(name string, v *string, def int64) (int64, error) {
		if !*c.set[name] {
			return def, nil
		}
		n, err := config.ParseSize(*v)
		if err != nil {
			return 0, fmt.Errorf("--%s: %w", name, err)
		}
		return n, nil
	}
	fileSizeDefault, bsDefault := int64(check.DefaultJobFileSize), int64(check.DefaultRandRWBlock)
	if *c.profile == check.ProfileFirstWrite {
		fileSizeDefault, bsDefault = check.DefaultFirstWriteFileSize, check.DefaultFirstWriteBlock
	}
	fileSize, err := size("file-size", c.fileSize, fileSizeDefault)
	if err != nil {
		return nil, err
	}
	bs, err := size("bs", c.bs, bsDefault)
	if err != nil {
		return nil, err
	}
	runtime := func(def time.Duration) time.Duration {
		if *c.set["runtime"] {
			return *c.runtime
		}
		return def
	}
	switch *c.profile {
	case check.ProfileSweep:
		opts := check.SweepOptions{Path: etcd.Path, ProbeDir: etcd.ProbeDir, Depth: *c.iodepth, Runtime: runtime(check.DefaultCellRuntime),
			FileSize: fileSize, Paths: etcd.Paths, Progress: etcd.Progress}
		return func(ctx context.Context) (report, error) { return nilIfError(check.Sweep(ctx, opts)) }, nil
	case check.ProfileFirstWrite:
		opts := check.FirstWriteOptions{Path: etcd.Path, ProbeDir: etcd.ProbeDir, BlockSize: int(min(bs, 1<<40)), FileSize: fileSize,
			Runtime: runtime(check.DefaultFirstWriteRuntime), Interval: *c.interval, Paths: etcd.Paths, Progress: etcd.Progress}
		return func(ctx context.Context) (report, error) { return nilIfError(check.FirstWrite(ctx, opts)) }, nil
	case check.ProfileRandRW:
		opts := check.RandRWOptions{Path: etcd.Path, ProbeDir: etcd.ProbeDir, BlockSize: int(min(bs, 1<<40)), Depth: *c.iodepth, ReadMix: *c.rwmixread,
			Runtime: runtime(check.DefaultRandRWRuntime), FileSize: fileSize, Paths: etcd.Paths, Progress: etcd.Progress}
		return func(ctx context.Context) (report, error) { return nilIfError(check.RandRW(ctx, opts)) }, nil
	}
	if *c.vantage != "" {
		spec := vantage.Spec{Process: *c.vantage}
		if pid, err := strconv.Atoi(*c.vantage); err == nil {
			spec = vantage.Spec{PID: pid}
		}
		return func(ctx context.Context) (report, error) { return nilIfError(check.RunVantage(ctx, etcd, spec)) }, nil
	}
	return func(ctx context.Context) (report, error) { return nilIfError(check.Run(ctx, etcd)) }, nil
}

// nilIfError keeps a typed nil report from becoming a non-nil interface.
func nilIfError[R report](rep R, err error) (report, error) {
	if err != nil {
		return nil, err
	}
	return rep, nil
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

// scopeAppFlags keeps each command to the application's flags it reads (reads, by command).
// The daemon's flags (--config.check, --web.*, --log.*) are the application's, so that
// `diskprobe_exporter --help` lists them and `diskprobe_exporter --config.file=…` needs no
// `serve`; kingpin would list them all again under `check --help` too, some 40 lines that
// check never reads, and accept them there in silence: `check --config.check PATH` ran a
// full measurement. A command named in reads lists only its own flags and those, and a
// daemon flag given to it is a usage error naming the flag.
func scopeAppFlags(app *kingpin.Application, reads map[string][]string) {
	appFlags := map[string]bool{}
	for _, f := range app.Model().Flags {
		appFlags[f.Name] = true
	}
	allowed := func(command, flag string) bool {
		if _, scoped := reads[command]; !scoped || !appFlags[flag] {
			return true
		}
		return flag == "help" || flag == "version" || flag == "help-long" || flag == "help-man" || flag == "completion-bash" || slices.Contains(reads[command], flag)
	}
	for command := range reads {
		app.GetCommand(command).PreAction(func(ctx *kingpin.ParseContext) error {
			for _, e := range ctx.Elements {
				if f, ok := e.Clause.(*kingpin.FlagClause); ok && !allowed(command, f.Model().Name) {
					return fmt.Errorf("--%s is the exporter's flag: %s does not read it", f.Model().Name, command)
				}
			}
			return nil
		})
	}
	app.UsageFuncs(map[string]any{
		"ScopedFlags": func(cmd *kingpin.CmdModel, flags []*kingpin.FlagModel) []*kingpin.FlagModel {
			if cmd == nil {
				return flags
			}
			var kept []*kingpin.FlagModel
			for _, f := range flags {
				if allowed(cmd.FullCommand, f.Name) {
					kept = append(kept, f)
				}
			}
			return kept
		},
	})
	app.UsageTemplate(strings.Replace(kingpin.DefaultUsageTemplate,
		"{{if .Context.Flags -}}\nFlags:\n{{.Context.Flags|FlagsToTwoColumns|FormatTwoColumns}}",
		"{{with ScopedFlags .Context.SelectedCommand .Context.Flags -}}\nFlags:\n{{.|FlagsToTwoColumns|FormatTwoColumns}}", 1))
}
