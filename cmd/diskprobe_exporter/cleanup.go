package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/answer"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// cleanupCommand is `diskprobe_exporter cleanup [DIR...]`: what a package's purge and an
// operator removing a target call, so that the files are recognised by the code that wrote
// them, not by a shell reading YAML.
type cleanupCommand struct {
	name   string
	dryRun *bool
	rmdir  *bool
	dirs   *[]string
}

func addCleanupCommand(app *kingpin.Application) *cleanupCommand {
	cmd := app.Command("cleanup", "Remove the exporter's probe files: in each DIR (a target's path or probe_dir), or else in each directory target of --config.file, "+
		"the files in .diskprobe/ that carry the exporter's header, then .diskprobe/ itself if nothing else is in it. Anything else is left, and named. "+
		"Prints each path removed; a DIR that does not exist is named on stderr (no such directory) and skipped. Stop the exporter first (or remove the target from its configuration and reload). "+
		"Exit status: 0 done, 1 something could not be looked at or removed.")
	return &cleanupCommand{
		name:   cmd.FullCommand(),
		dryRun: cmd.Flag("dry-run", "Print what would be removed, one path a line, and remove nothing.").Bool(),
		rmdir: cmd.Flag("rmdir", "Then remove each DIR named on the command line when it is left empty: a probe_dir made for the exporter alone, "+
			"such as the one the kubelet creates for the Helm chart's pods. A DIR holding anything is left, and named.").Bool(),
		dirs: cmd.Arg("dir", "Directory whose .diskprobe/ to clean (default: every target of --config.file).").Strings(),
	}
}

func (c *cleanupCommand) run(configFile string) int {
	dirs := *c.dirs
	named := len(dirs) > 0
	if *c.rmdir && len(dirs) == 0 {
		// The configuration's directories include targets' own paths (etcd's data directory).
		fmt.Fprintln(os.Stderr, "cleanup --rmdir: name the directories to remove; it never takes them from --config.file")
		return 1
	}
	if len(dirs) == 0 {
		cfg, err := readConfig(configFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, t := range cfg.Targets {
			dirs = append(dirs, t.ProbeRoot()) // a block device has no .diskprobe: nothing found
		}
	}
	var calls answer.Paths
	code := 0
	for _, dir := range dirs {
		var (
			found probe.OwnFiles
			err   error
		)
		missing := false
		if !calls.Call(context.Background(), dir, answer.CommandWait, func() {
			// A directory named on the command line that is not there is said: a
			// Job or a script that names the wrong one must not pass as a clean node.
			var st unix.Stat_t
			if named && errors.Is(unix.Lstat(dir, &st), unix.ENOENT) {
				missing = true
				return
			}
			found, err = probe.FindOwnFiles(dir)
		}) {
			fmt.Fprintf(os.Stderr, "%s: skipped, %v\n", dir, &answer.NotAnsweredError{Path: dir, Wait: answer.CommandWait})
			code = 1
			continue
		}
		if missing {
			fmt.Fprintf(os.Stderr, "%s: no such directory, nothing to clean there\n", dir)
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
			code = 1
			continue
		}
		for _, f := range found.Foreign {
			fmt.Fprintf(os.Stderr, "%s: left, it was not created by diskprobe_exporter (so is %s)\n", f, found.Dir)
		}
		if *c.dryRun {
			for _, f := range found.Files {
				printPath(f)
			}
			if found.Dir != "" && len(found.Foreign) == 0 {
				printPath(found.Dir)
			}
			if *c.rmdir && len(found.Foreign) == 0 {
				only := false
				if calls.Call(context.Background(), dir, answer.CommandWait, func() { only = onlyProbeDirIn(dir) }) && only {
					printPath(dir)
				}
			}
			continue
		}
		var removed []string
		if !calls.Call(context.Background(), dir, answer.CommandWait, func() { removed, err = found.Remove() }) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, &answer.NotAnsweredError{Path: dir, Wait: answer.CommandWait})
			code = 1
			continue
		}
		for _, f := range removed {
			printPath(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
			code = 1
			continue
		}
		if *c.rmdir && len(found.Foreign) == 0 {
			if !calls.Call(context.Background(), dir, answer.CommandWait, func() { err = removeEmptyDir(dir) }) {
				err = &answer.NotAnsweredError{Path: dir, Wait: answer.CommandWait}
			}
			switch {
			case err == nil:
				printPath(dir)
			case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
				fmt.Fprintf(os.Stderr, "%s: left, it holds more than the exporter's files\n", dir)
			case errors.Is(err, unix.ENOENT):
			default:
				fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
				code = 1
			}
		}
	}
	return code
}

// removeEmptyDir removes dir if it is an empty directory (rmdir: never its contents), and not
// a symlink to one.
func removeEmptyDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &os.PathError{Op: "rmdir", Path: dir, Err: unix.ENOTDIR}
	}
	if err := unix.Rmdir(dir); err != nil {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// printPath prints one path a line, the form maintainer scripts read; a path with a
// newline cannot be one line and is named on stderr instead.
func printPath(path string) {
	if strings.ContainsRune(path, '\n') {
		fmt.Fprintf(os.Stderr, "%q: not listed, its name has a newline\n", path)
		return
	}
	fmt.Println(path)
}

// onlyProbeDirIn reports whether dir holds nothing but the exporter's .diskprobe/: what
// --rmdir would leave empty.
func onlyProbeDirIn(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != probe.DirName {
			return false
		}
	}
	return true
}
