package vantage

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// IOPrio is an I/O scheduling class and level, as ioprio_get(2) returns it.
type IOPrio uint16

// The I/O priority classes (linux/ioprio.h).
const (
	ClassNone IOPrio = iota // no class set: best effort at a level from the CPU nice value
	ClassRT
	ClassBE
	ClassIdle
)

const (
	ioprioClassShift = 13
	ioprioWhoProcess = 1 // IOPRIO_WHO_PROCESS: a pid names one task, a thread
)

// Class is the priority's class.
func (p IOPrio) Class() IOPrio { return p >> ioprioClassShift }

// Level is the priority's level within its class, 0 (highest) to 7.
func (p IOPrio) Level() int { return int(p & (1<<ioprioClassShift - 1)) }

// String is ionice's way of writing it: "be/4", "rt/0", "idle", "none".
func (p IOPrio) String() string {
	switch p.Class() {
	case ClassNone:
		return "none"
	case ClassRT:
		return fmt.Sprintf("rt/%d", p.Level())
	case ClassBE:
		return fmt.Sprintf("be/%d", p.Level())
	case ClassIdle:
		return "idle"
	}
	return fmt.Sprintf("class%d/%d", p.Class(), p.Level())
}

// ProcessIOPrio is the I/O priority of the task tid (a process's PID is its main
// thread's), by raw system call: x/sys/unix has no wrapper.
func ProcessIOPrio(tid int) (IOPrio, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if errno != 0 {
		return 0, fmt.Errorf("ioprio_get(%d): %w", tid, errno)
	}
	return IOPrio(r), nil
}

// setThreadIOPrio gives the calling thread priority p.
func setThreadIOPrio(p IOPrio) error {
	_, _, errno := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(unix.Gettid()), uintptr(p))
	if errno != 0 {
		return fmt.Errorf("ioprio_set(%s): %w", p, errno)
	}
	return nil
}
