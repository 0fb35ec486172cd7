// Package packaging tests what `make package` builds from packaging/ at the top of the
// repository (nfpm.yaml, the maintainer scripts, the default configuration and the
// /etc/default file that go into the .deb and .rpm).
//
// It builds the packages, checks what is in them, checks the systemd unit's hardening, and
// (as root) installs the .deb on the machine, runs the installed exporter the way the unit
// runs it, upgrades it and purges it again.
package packaging
