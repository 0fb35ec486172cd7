// Package systemd is the real-systemd tier: the .deb installed on a Debian 12 minbase system
// booted with its own systemd as PID 1 (systemd-nspawn -b), as a user's host runs it. The
// root is made once per machine by debootstrap from the machine's apt source
// (scripts/tools.sh debian-root, cached outside the clone) and copied for every run.
//
// The host's PID 1 need not be systemd: the container runs unregistered
// (--register=no --keep-unit) and the test reaches it with nsenter into its PID 1. It needs
// root, systemd-nspawn and the cached root; without them it skips, saying why, unless
// DISKPROBE_TOOLS_REQUIRED=1 (make test as root), where it fails.
package systemd
