package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs the real main when asked to, so that the tests below see what a user sees:
// kingpin's parsing, help and exit status, from the flags main registers.
func TestMain(m *testing.M) {
	if os.Getenv("DISKPROBE_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"diskprobe_exporter"}, strings.Fields(os.Getenv("DISKPROBE_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the binary's main with args, returning stdout, stderr and the exit status.
func runMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DISKPROBE_TEST_RUN_MAIN=1", "DISKPROBE_TEST_ARGS="+strings.Join(args, " "), "COLUMNS=200")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// `check --help` listed some 40 lines of the daemon's flags (--web.*, --log.*, --config.check)
// that check never reads; `diskprobe_exporter --help` must still list them.
func TestCheckHelpListsOnlyFlagsCheckReads(t *testing.T) {
	daemon := []string{"--config.check", "--config.file", "--web.listen-address", "--web.config.file", "--web.telemetry-path", "--log.level"}
	out, errOut, _ := runMain(t, "check", "--help")
	help := out + errOut
	for _, want := range []string{"--probe-dir", "--profile", "--path.sysfs", "--path.procfs", "[no-]json"} {
		if !strings.Contains(help, want) {
			t.Errorf("check --help does not list %s:\n%s", want, help)
		}
	}
	for _, flag := range daemon {
		if strings.Contains(help, flag+"=") || strings.Contains(help, flag+" ") || strings.Contains(help, "[no-]"+flag[2:]) {
			t.Errorf("check --help lists the daemon's %s, which check does not read:\n%s", flag, help)
		}
	}
	out, errOut, _ = runMain(t, "--help")
	for _, flag := range daemon {
		if !strings.Contains(out+errOut, strings.TrimPrefix(flag, "--")) {
			t.Errorf("diskprobe_exporter --help does not list %s:\n%s", flag, out+errOut)
		}
	}
}

// `check --config.check PATH` ran a full measurement, the flag ignored in silence.
func TestCheckRefusesTheDaemonsFlagsByName(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--config.check", t.TempDir()},
		{"--web.listen-address=:0", "check", t.TempDir()},
		{"cleanup", "--log.level=debug", t.TempDir()},
	} {
		_, errOut, code := runMain(t, args...)
		if code != exitError || !strings.Contains(errOut, "is the exporter's flag") {
			t.Errorf("%v: exit %d, stderr %q; want %d and the flag named", args, code, errOut, exitError)
		}
	}
}

// The daemon's flags stay on the application: no `serve` needed before them.
func TestDaemonFlagsWorkWithoutTheWordServe(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yml")
	_, errOut, code := runMain(t, "--config.file="+missing, "--config.check")
	if code != 1 || !strings.Contains(errOut, missing) {
		t.Errorf("--config.file=%s --config.check: exit %d, stderr %q; want 1 naming the file", missing, code, errOut)
	}
}

// `cleanup --rmdir DIR` on a DIR that is not there printed nothing: a cleanup Job pointed at
// the wrong directory passed as a clean node while the probe files stayed elsewhere.
func TestCleanupNamesADirectoryThatIsNotThere(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "diskprobe-etcd")
	out, errOut, code := runMain(t, "cleanup", "--rmdir", missing, dir)
	if !strings.Contains(errOut, missing+": no such directory") {
		t.Errorf("cleanup --rmdir %s: stderr %q, want it named as missing", missing, errOut)
	}
	if strings.Contains(errOut, dir+":") || code != 0 || !strings.Contains(out, dir) {
		t.Errorf("cleanup --rmdir of an empty directory beside the missing one: exit %d, stdout %q, stderr %q; want it removed, exit 0", code, out, errOut)
	}
}
