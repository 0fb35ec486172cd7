package collector

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/config"
	"github.com/diskprobe/diskprobe_exporter/probe"
)

// /-/ready turns 503 on errors that wait for an operator, and only on those: the errors
// reach the runner wrapped (a PathError, a config error of a path that answered late, the
// probe's explained messages), and a class lost in the wrapping would leave a target that
// can never work "ready", or make a full disk or a dying one unready.
func TestOnlyPermissionAndReadOnlyErrorsKeepATargetUnready(t *testing.T) {
	tg := config.Target{Name: "t", Path: "/x", Lines: map[string]int{"path": 3}}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"permission denied creating a file", &os.PathError{Op: "open", Path: "/x/.diskprobe/fsync.probe", Err: syscall.EACCES}, true},
		{"read-only filesystem on write", fmt.Errorf("writing: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.EROFS}), true},
		{"operation not permitted", syscall.EPERM, true},
		{"read-only, found when a late path answered", tg.FieldError("d.yml", "path", "%w", &probe.NotWritableError{Dir: "/x", Err: syscall.EROFS}), true},
		{"not writable, found when a late path answered", tg.FieldError("d.yml", "path", "%w", &probe.NotWritableError{Dir: "/x", Err: syscall.EACCES}), true},
		{"I/O error", &os.PathError{Op: "read", Path: "/x", Err: syscall.EIO}, false},
		{"disk full", syscall.ENOSPC, false},
		{"under the free-space floor", fmt.Errorf("%w: 10 MiB free", probe.ErrLowFreeSpace), false},
		{"a path that does not exist yet", tg.FieldError("d.yml", "path", "/x does not exist"), false},
		{"a foreign file", &probe.ForeignFileError{Path: "/x/.diskprobe", Reason: "it is a symlink"}, false},
		{"timeout", errors.New("operation took longer than limits.timeout"), false},
	}
	for _, c := range cases {
		if got := permanent(c.err); got != c.want {
			t.Errorf("%s (%v): permanent %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// The rule itself: not ready only while no round has succeeded and every probe that has
// finished a round last failed for good.
func TestBrokenTargetIsOneThatNeverWorkedAndOnlyFailsForGood(t *testing.T) {
	denied := &os.PathError{Op: "open", Path: "/dev/x", Err: syscall.EACCES}
	newRunner := func() *runner { return &runner{probes: []*probeRun{{name: "randread"}, {name: "seqread"}}} }

	r := newRunner()
	if why := r.brokenBy(); why != "" {
		t.Errorf("broken before any round ended: %q", why)
	}
	r.probes[0].ended(denied)
	if why := r.brokenBy(); why == "" {
		t.Error("not broken after its only finished round failed with permission denied")
	}
	r.probes[1].ended(syscall.EIO)
	if why := r.brokenBy(); why != "" {
		t.Errorf("broken while another probe fails for a reason that may pass: %q", why)
	}
	r.probes[1].ended(denied)
	if why := r.brokenBy(); why != "randread: "+denied.Error() {
		t.Errorf("broken by %q, want the first probe and its error", why)
	}

	r = newRunner()
	r.status.worked.Store(true)
	r.probes[0].ended(denied)
	r.probes[1].ended(denied)
	if why := r.brokenBy(); why != "" {
		t.Errorf("a target that worked once is broken by later failures: %q", why)
	}
}
