package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// checkCommand is `diskprobe_exporter check PATH`.
type checkCommand struct {
	name string
	path *string
}

func addCheckCommand(app *kingpin.Application) *checkCommand {
	cmd := app.Command("check", "Measure PATH once with etcd's fio recipe and give a PASS/FAIL verdict against etcd's targets.")
	return &checkCommand{name: cmd.FullCommand(), path: cmd.Arg("path", "Directory (or block device, read probes only) to measure.").Required().String()}
}

func (c *checkCommand) run(paths device.Paths) int {
	fmt.Fprintln(os.Stderr, "check: not implemented yet")
	return 2
}
