package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/diskprobe/diskprobe_exporter/arrival"
	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// defaultArrivalListen is the arrival command's port: beside serve's 10052, so that both
// can run on one host.
const defaultArrivalListen = ":10053"

// arrivalCommand is `diskprobe_exporter arrival`: how long a volume of each storage class
// takes to arrive, from inside a Kubernetes cluster.
type arrivalCommand struct {
	name          string
	classes       *[]string
	interval      *time.Duration
	timeout       *time.Duration
	size          *string
	accessMode    *string
	namespace     *string
	image         *string
	ownerName     *string
	ownerUID      *string
	accountDir    *string
	listenFlagSet bool // --web.listen-address given: else defaultArrivalListen
}

// arrivalReads are the application's flags the arrival command reads.
var arrivalReads = []string{"web.listen-address", "web.systemd-socket", "web.config.file", "web.telemetry-path", "web.enable-pprof", "web.max-connections", "log.level", "log.format"}

func addArrivalCommand(app *kingpin.Application) *arrivalCommand {
	cmd := app.Command("arrival", "Measure how long a volume of each storage class takes to arrive, from a pod of a Kubernetes cluster: "+
		"once per --interval, create a PVC of the class and a pod of --image writing 4KiB to it (arrival-write), time the PVC Bound, the pod running and the pod Succeeded, delete both and time the PVC gone; "+
		"serve the times and the failures by stage on /metrics (port 10053 unless --web.listen-address). "+
		"Needs the service account's rights in --namespace: persistentvolumeclaims and pods create, get, list, delete; events list.")
	c := &arrivalCommand{name: cmd.FullCommand()}
	c.classes = cmd.Flag("storage-class", "A StorageClass to probe (repeat the flag for more).").Required().Strings()
	c.interval = cmd.Flag("interval", "How often each class is probed; the classes' attempts are staggered over it.").Default("10m").Duration()
	c.timeout = cmd.Flag("timeout", "How long each stage may take (bound, running, written, deleted) before the attempt fails at it.").Default("5m").Duration()
	c.size = cmd.Flag("size", "The PVC's storage request, as Kubernetes writes quantities.").Default("1Gi").String()
	c.accessMode = cmd.Flag("access-mode", "The PVC's access mode: ReadWriteOnce, ReadWriteOncePod or ReadWriteMany.").Default("ReadWriteOnce").String()
	c.namespace = cmd.Flag("namespace", "Where the PVCs and pods are made (default: the pod's own, from the service account).").String()
	c.image = cmd.Flag("image", "The image the writer pod runs: this exporter's, which has "+arrival.WriterCommand[0]+".").Required().String()
	c.ownerName = cmd.Flag("owner-pod-name", "The pod this runs in (the downward API's metadata.name): what is made gets an owner reference to it, and goes when it goes. With --owner-pod-uid.").String()
	c.ownerUID = cmd.Flag("owner-pod-uid", "That pod's metadata.uid.").String()
	c.accountDir = cmd.Flag("kubernetes.service-account-dir", "Where the service account's token, ca.crt and namespace are.").Default(kubeapi.ServiceAccountDir).Hidden().String()
	cmd.PreAction(func(ctx *kingpin.ParseContext) error {
		for _, e := range ctx.Elements {
			if f, ok := e.Clause.(*kingpin.FlagClause); ok && f.Model().Name == "web.listen-address" {
				c.listenFlagSet = true
			}
		}
		return nil
	})
	return c
}

// quantity is what the API server takes as a storage request (a plain decimal or binary
// suffix; the exponent forms are left out).
var quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`)

var accessModes = []string{"ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"}

// check refuses, as usage errors, flags the command cannot work with.
func (c *arrivalCommand) check() error {
	switch {
	case *c.interval <= 0:
		return fmt.Errorf("--interval=%s: must be positive", *c.interval)
	case *c.timeout <= 0:
		return fmt.Errorf("--timeout=%s: must be positive", *c.timeout)
	case !quantity.MatchString(*c.size):
		return fmt.Errorf("--size=%q: not a quantity (1Gi, 500Mi, 10G)", *c.size)
	case !slices.Contains(accessModes, *c.accessMode):
		// Not kingpin's Enum: its error does not name the flag. Read-only-many is not
		// offered: the writer writes.
		return fmt.Errorf("--access-mode=%s: one of %s", *c.accessMode, strings.Join(accessModes, ", "))
	case (*c.ownerName == "") != (*c.ownerUID == ""):
		return errors.New("--owner-pod-name and --owner-pod-uid go together")
	}
	for i, class := range *c.classes {
		if class == "" {
			return errors.New("--storage-class: empty")
		}
		if slices.Contains((*c.classes)[:i], class) {
			return fmt.Errorf("--storage-class=%s: given twice", class)
		}
	}
	return nil
}

func (c *arrivalCommand) run(httpOpts httpOptions, toolkitFlags *web.FlagConfig, logger *slog.Logger) int {
	if err := c.check(); err != nil {
		fmt.Fprintf(os.Stderr, "diskprobe_exporter: error: %s, try --help\n", err)
		return exitError
	}
	if !c.listenFlagSet {
		*toolkitFlags.WebListenAddresses = []string{defaultArrivalListen}
	}
	logger.Info("starting diskprobe_exporter arrival", "version", version.Info(), "storage_classes", *c.classes)

	api, namespace, err := kubeapi.InCluster(*c.accountDir)
	if err != nil {
		logger.Error("not starting", "err", err)
		return 1
	}
	if *c.namespace != "" {
		namespace = *c.namespace
	}
	if namespace == "" {
		logger.Error("not starting", "err", fmt.Errorf("no --namespace and no %s/namespace", *c.accountDir))
		return 1
	}
	listeners, ok := openListeners(toolkitFlags, logger)
	if !ok {
		return 1
	}
	defer closeListeners(listeners)

	cfg := arrival.Config{
		Classes:    *c.classes,
		Interval:   *c.interval,
		Timeout:    *c.timeout,
		Size:       *c.size,
		AccessMode: *c.accessMode,
		Namespace:  namespace,
		Image:      *c.image,
	}
	if *c.ownerUID != "" {
		cfg.Owner = &kubeapi.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: *c.ownerName, UID: *c.ownerUID}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prober, err := arrival.New(api, cfg, reg, logger)
	if err != nil {
		logger.Error("not starting", "err", err)
		return 1
	}
	ready := func() error { return nil }
	noReload := func() error { return errors.New("arrival has no configuration file to reload") }
	handler, err := newHandler(reg, httpOpts, ready, noReload, logger)
	if err != nil {
		logger.Error("not starting", "err", err)
		return 1
	}
	server, serveErr := startServer(listeners, handler, httpOpts, toolkitFlags, logger)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	probed := make(chan struct{})
	go func() {
		prober.Run(ctx)
		close(probed)
	}()
	code := 0
	select {
	case err := <-serveErr:
		logger.Error("HTTP server failed", "err", err)
		code = 1
	case <-ctx.Done():
		logger.Info("shutting down; deleting the PVCs and pods of the attempts under way")
	}
	stop()
	<-probed // Run returns once the objects in flight are deleted (bounded)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_ = server.Shutdown(shutdownCtx)
	cancel()
	return code
}

// addArrivalWriteCommand is the writer pod's command, hidden: `arrival-write DIR`.
func addArrivalWriteCommand(app *kingpin.Application) (string, *string) {
	cmd := app.Command("arrival-write", "The arrival prober's writer pod: write 4KiB to DIR/"+arrival.WriteFile+", fdatasync it, remove it, print one line.").Hidden()
	return cmd.FullCommand(), cmd.Arg("dir", "The volume's mount point.").Required().String()
}

func runArrivalWrite(dir string) int {
	took, err := arrival.Write(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "arrival-write: %v\n", err)
		return 1
	}
	fmt.Println(arrival.WriteLine(dir, took))
	return 0
}

// addVolumePrepareCommand is a storage class probe pod's init container, hidden:
// `volume-prepare VOLUME` makes VOLUME/diskprobe a probe root the exporter accepts.
func addVolumePrepareCommand(app *kingpin.Application) (string, *string) {
	cmd := app.Command("volume-prepare", "A storage class's probe pod: make VOLUME/"+probe.VolumeRootName+
		" (0755), or narrow it to what the exporter accepts as a probe root, and print what was done.").Hidden()
	return cmd.FullCommand(), cmd.Arg("volume", "The volume's mount point.").Required().String()
}

func runVolumePrepare(volume string) int {
	did, err := probe.PrepareVolumeRoot(volume, probe.VolumeRootName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "volume-prepare: %v\n", err)
		return 1
	}
	fmt.Println(did)
	return 0
}
