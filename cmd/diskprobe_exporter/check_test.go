package main

import (
	"testing"

	"github.com/diskprobe/diskprobe_exporter/check"
)

// An interrupted check whose I/O is stuck names what it may leave behind. With --probe-dir
// the files are in the probe directory, and PATH (etcd's data directory) holds nothing of
// the check's: the message named PATH/.diskprobe-check-* there, sending the user to look
// inside /var/lib/etcd for files that were never there.
func TestInterruptMessageNamesTheDirectoryTheFilesAreIn(t *testing.T) {
	for _, c := range []struct {
		opts check.Options
		want string
	}{
		{check.Options{Path: "/var/tmp"}, "/var/tmp/" + check.ScratchPrefix + "*"},
		{check.Options{Path: "/var/lib/etcd", ProbeDir: "/var/lib/diskprobe-etcd"}, "/var/lib/diskprobe-etcd/" + check.ScratchPrefix + "*"},
		{check.Options{Path: "/var/lib/etcd/", ProbeDir: "/var/lib/diskprobe-etcd/"}, "/var/lib/diskprobe-etcd/" + check.ScratchPrefix + "*"},
	} {
		if got := scratchGlob(c.opts); got != c.want {
			t.Errorf("path %q, probe dir %q: the message names %s, want %s", c.opts.Path, c.opts.ProbeDir, got, c.want)
		}
	}
}
