// Package packaging holds no code: this directory is the nfpm configuration
// (nfpm.yaml), the maintainer scripts, the default configuration and
// /etc/default file that `make package` puts into the .deb and .rpm.
//
// Its tests build the packages, check what is in them, check the systemd unit's
// hardening, and (as root) install the .deb on the machine, run the installed
// exporter the way the unit runs it, upgrade it and purge it again.
package packaging
