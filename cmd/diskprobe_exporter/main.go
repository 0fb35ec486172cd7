// Command diskprobe_exporter runs small, rate-limited disk probes on configured
// directories and block devices and exposes their latencies as Prometheus histograms.
// This file wires the daemon: flags, logger, registry, HTTP, signals, and the one
// goroutine that reads, plans and applies the configuration at start and on reload.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	webflag "github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/diskprobe/diskprobe_exporter/collector"
	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/device"
	"github.com/diskprobe/diskprobe_exporter/inspect"
	"github.com/diskprobe/diskprobe_exporter/internal/answer"
)

const (
	defaultListen = ":10052"
	// shutdownGrace bounds how long SIGTERM waits for outstanding I/O; an operation stuck
	// in the kernel is abandoned so the process exits within 5 s. It was 4 s: exits then
	// measured 4.00-4.03 s, too close to 5 s on a loaded host.
	shutdownGrace = 3 * time.Second
	// inspectWait bounds how long start-up and a reload wait for a target's path to
	// answer stat and statfs. A path that does not (a hung NFS or FUSE mount) is not an
	// error: its target starts and its worker inspects it when it answers. Short, so that
	// /metrics is up and a reload has answered within 2 s whatever hangs.
	inspectWait = time.Second
)

// init keeps the main goroutine, which does no I/O on any target, on the process's main
// thread, and so every other goroutine off it. A thread stuck in the kernel on a hung
// mount (FUSE, hard NFS) cannot be killed, not even by exit; were it the main thread, the
// process would stay in state D after SIGTERM instead of exiting, leaving a zombie until
// the I/O returns, as the other threads do.
func init() { runtime.LockOSThread() }

func main() {
	app := kingpin.New("diskprobe_exporter", "Runs small, rate-limited disk probes (etcd-WAL-like write+fdatasync, 4 KiB O_DIRECT random reads, sequential throughput) on directories and block devices, and exposes them as Prometheus metrics.")
	app.HelpFlag.Short('h')
	app.Version(version.Print("diskprobe_exporter"))
	configFile := app.Flag("config.file", "Configuration file.").Default("/etc/diskprobe_exporter/diskprobe.yml").String()
	paths := device.Paths{}
	app.Flag("path.procfs", "procfs mountpoint.").Default("/proc").StringVar(&paths.ProcFS)
	app.Flag("path.sysfs", "sysfs mountpoint.").Default("/sys").StringVar(&paths.SysFS)
	logConfig := &promslog.Config{}
	promslogflag.AddFlags(app, logConfig)

	// The exporter's flags live on the application, not on the default `serve` command,
	// so that `--help` shows them.
	configCheck := app.Flag("config.check", "Validate the configuration file against the disks as this user sees them (every error at once: paths, tmpfs, probe directories it cannot write), print a summary, and exit (1 on errors).").Bool()
	var httpOpts httpOptions
	app.Flag("web.telemetry-path", "Path under which to expose metrics: starts with /, letters, digits and / - . _ ~; not /, nor under /-/ or /debug/pprof/.").Default("/metrics").StringVar(&httpOpts.metricsPath)
	app.Flag("web.enable-pprof", "Serve Go runtime profiles (CPU, heap, goroutines) under /debug/pprof/ and link them from the landing page.").BoolVar(&httpOpts.enablePprof)
	app.Flag("web.enable-lifecycle", "Reload the configuration on POST /-/reload (SIGHUP always does). Off, the endpoint answers 403: anyone who reaches the port could otherwise make the exporter re-read its configuration.").BoolVar(&httpOpts.enableLifecycle)
	app.Flag("web.max-connections", "Most HTTP connections held at once; at the cap the longest idle one is closed for a new one, and the rest wait in the kernel's accept queue.").Default(strconv.Itoa(defaultMaxConnections)).IntVar(&httpOpts.maxConnections)
	toolkitFlags := webflag.AddFlags(app, defaultListen)
	serve := app.Command("serve", "Run the exporter (the default command).").Default()

	check := addCheckCommand(app)
	cleanup := addCleanupCommand(app)
	arrivalCmd := addArrivalCommand(app)
	arrivalWrite, arrivalWriteDir := addArrivalWriteCommand(app)
	volumePrepare, volumePrepareDir := addVolumePrepareCommand(app)
	scopeAppFlags(app, map[string][]string{
		check.name:      {"path.procfs", "path.sysfs"},
		cleanup.name:    {"config.file"},
		arrivalCmd.name: arrivalReads,
		arrivalWrite:    {},
		volumePrepare:   {},
	})

	cmd, err := app.Parse(os.Args[1:])
	if err == nil {
		err = httpOpts.check()
	}
	if err != nil {
		// A usage error exits 2, as Go's flag package and GNU tools do: 1 is check's FAIL
		// verdict, and a script must not read a typo as a bad disk (kingpin.MustParse
		// exits 1).
		app.Errorf("%s, try --help", err)
		os.Exit(exitError)
	}
	logger := promslog.New(logConfig)

	switch cmd {
	case check.name:
		os.Exit(check.run(paths))
	case cleanup.name:
		os.Exit(cleanup.run(*configFile))
	case arrivalCmd.name:
		os.Exit(arrivalCmd.run(httpOpts, toolkitFlags, logger))
	case arrivalWrite:
		os.Exit(runArrivalWrite(*arrivalWriteDir))
	case volumePrepare:
		os.Exit(runVolumePrepare(*volumePrepareDir))
	case serve.FullCommand():
	}

	if *configCheck {
		inspector := inspect.NewInspector(paths)
		checked, err := load(*configFile, func(cfg *config.Config) (*config.Config, error) { return inspector.Config(cfg, answer.CommandWait) })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(checked.Summary())
		return
	}
	os.Exit(run(*configFile, paths, httpOpts, toolkitFlags, logger))
}

// readConfig reads and parses a configuration file without looking at the disks: the
// daemon asks each target's path itself, with a bounded wait, because a path on a hung
// mount never answers. Relative target paths are taken from the file's directory, made
// absolute here (the one system call: the working directory). With a parse error the
// Config, when not nil, still holds the targets that parsed, so that load asks the disks
// about those too and reports every error of the file in one run.
func readConfig(file string) (*config.Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return config.ParseIn(data, file, dir)
}

// load reads a configuration file and inspects its targets on the disks, reporting every
// error of the file at once: the targets that parsed are asked about on disk even when
// others did not.
func load[T any](file string, inspectAll func(*config.Config) (T, error)) (T, error) {
	var none T
	cfg, err := readConfig(file)
	if cfg == nil {
		return none, err
	}
	got, inspectErr := inspectAll(cfg)
	if err := config.JoinErrors(err, inspectErr); err != nil {
		return none, err
	}
	return got, nil
}

// plan reads a configuration file and inspects its targets on the disks for Apply.
func plan(scheduler *collector.Scheduler, file string, logger *slog.Logger) (*collector.Plan, error) {
	p, err := load(file, func(cfg *config.Config) (*collector.Plan, error) { return scheduler.Plan(cfg, inspectWait) })
	if err != nil {
		return nil, err
	}
	logEach(logger, slog.LevelWarn, "target's path did not answer; not ready until it does", p.Unanswered())
	return p, nil
}

// logEach logs each error of errs in a record of its own, with the error as its "err"
// attribute: an error of a configuration file is one per field at fault (config.JoinErrors
// joins them), and a record apiece keeps each readable in the journal, naming its file,
// line and field, rather than one record with every error and "\n" between them.
func logEach(logger *slog.Logger, level slog.Level, msg string, errs []error) {
	ctx := context.Background()
	if !logger.Enabled(ctx, level) {
		return
	}
	// The records' source is the caller's line, not this one.
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	for _, err := range errs {
		r := slog.NewRecord(time.Now(), level, msg, pcs[0])
		r.Add("err", err)
		_ = logger.Handler().Handle(ctx, r)
	}
}

// errorsOf are the errors err joins, or err alone.
func errorsOf(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func run(configFile string, paths device.Paths, httpOpts httpOptions, toolkitFlags *web.FlagConfig, logger *slog.Logger) int {
	logger.Info("starting diskprobe_exporter", "version", version.Info(), "config", configFile)
	logger.Info("build context", "build_context", version.BuildContext())

	// The web configuration and the listen addresses before any probe starts: a typo there
	// must not leave probes running behind a server that never came up.
	listeners, ok := openListeners(toolkitFlags, logger)
	if !ok {
		return 1
	}
	defer closeListeners(listeners)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := collector.NewMetrics(reg)
	scheduler := collector.NewScheduler(metrics, paths, collector.RealClock{}, logger)
	first, err := plan(scheduler, configFile, logger)
	if err != nil {
		logEach(logger, slog.LevelError, "invalid configuration; not starting", errorsOf(err))
		return 1
	}
	if err := scheduler.Apply(first); err != nil {
		logger.Error("not starting", "err", err)
		return 1
	}
	metrics.SetReload(true, time.Now())

	// Reloads from SIGHUP and POST /-/reload go through one goroutine, so two never race;
	// a reload waits at most inspectWait for the paths it asks, so it always answers.
	// Shutdown closes stopping: the goroutine takes no reload after it, and one under way
	// is not applied (Apply answers ErrStopped once Stop has begun).
	reloads := make(chan chan error)
	hup := make(chan struct{}, 1) // SIGHUPs that came while a reload ran are one more
	stopping := make(chan struct{})
	go func() {
		for {
			var done chan error
			select {
			case done = <-reloads:
			case <-hup:
			case <-stopping:
				return
			}
			p, err := plan(scheduler, configFile, logger)
			if err == nil {
				err = scheduler.Apply(p)
			}
			switch {
			case errors.Is(err, collector.ErrStopped):
				logger.Info("reload not applied: shutting down")
			case err != nil:
				logEach(logger, slog.LevelError, "reload failed; keeping the running configuration", errorsOf(err))
				metrics.SetReload(false, time.Now())
			default:
				metrics.SetReload(true, time.Now())
				logger.Info("configuration reloaded", "file", configFile)
			}
			if done != nil {
				done <- err
			}
		}
	}()
	reload := func() error {
		done := make(chan error, 1)
		select {
		case reloads <- done:
		case <-stopping:
			return collector.ErrStopped
		}
		return <-done // every reload taken is answered
	}
	shutdown := func() bool {
		close(stopping)
		return scheduler.Stop(shutdownGrace)
	}

	handler, err := newHandler(reg, httpOpts, scheduler.Ready, reload, logger)
	if err != nil {
		logger.Error("not starting", "err", err)
		shutdown()
		return 1
	}
	server, serveErr := startServer(listeners, handler, httpOpts, toolkitFlags, logger)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case err := <-serveErr:
			logger.Error("HTTP server failed", "err", err)
			shutdown()
			return 1
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				// Not waited for: a signal loop stuck in a reload would not see SIGTERM.
				select {
				case hup <- struct{}{}:
				default: // one is queued already
				}
				continue
			}
			logger.Info("shutting down", "signal", sig.String())
			if !shutdown() {
				logger.Warn("exiting with I/O still stuck in the kernel; the process may linger as a zombie until it returns")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_ = server.Shutdown(ctx)
			cancel()
			return 0
		}
	}
}

// startServer serves handler on listeners, held to --web.max-connections, with the
// toolkit's TLS and authentication (--web.config.file); the channel answers when it fails.
func startServer(listeners []net.Listener, handler http.Handler, httpOpts httpOptions, toolkitFlags *web.FlagConfig, logger *slog.Logger) (*http.Server, <-chan error) {
	limit := newConnLimit(httpOpts.maxConnections)
	server := &http.Server{
		Handler: handler,
		// A slow or oversized client must not tie up the server.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		// Longer than the scrape intervals people use (15 s to 1 min; Prometheus keeps its
		// own idle connections 5 min), so that a scrape reuses its connection instead of
		// paying a TCP handshake, and a TLS one, each time. The connection cap, not this,
		// bounds what idle connections cost: at the cap the longest idle one is closed.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ConnState:      limit.ConnState,
	}
	limited := make([]net.Listener, len(listeners))
	for i, l := range listeners {
		limited[i] = limit.Listener(l)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ServeMultiple(limited, server, toolkitFlags, logger) }()
	return server, serveErr
}
