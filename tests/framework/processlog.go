package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// ProcessLog is a process's stdout and stderr, written by the process straight into a file
// of the test's. Through a pipe, a line the process logged before it changed a metric could
// still sit in the pipe, or in the goroutine copying it, when the test saw the metric and
// read the log: on a loaded machine a test found its line missing (TestBadReloadKeepsTheRunningConfig,
// CPUs busy). A file has no such gap: what write(2) returned from is there for the next read.
type ProcessLog struct {
	f *os.File
}

// NewProcessLog makes an empty log file in the test's temporary directory.
func NewProcessLog(t testing.TB) *ProcessLog {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "process.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &ProcessLog{f: f}
}

// File is what to give exec.Cmd's Stdout and Stderr: the process gets the descriptor itself.
func (l *ProcessLog) File() *os.File { return l.f }

// String is everything the process has written so far.
func (l *ProcessLog) String() string {
	b, err := os.ReadFile(l.f.Name())
	if err != nil {
		return "(reading the process's log: " + err.Error() + ")"
	}
	return string(b)
}
