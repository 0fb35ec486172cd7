#!/bin/sh
# Prints nfpm's configuration for one format, as `make package` stages it:
#
#   packaging/nfpm-config.sh deb|rpm STAGE
#
# packaging/nfpm.yaml, then the documentation: the man page, LICENSE, README.md, docs/*.md and
# the example drop-in for block devices (systemd/devices.conf),
# one entry each, `type: doc` for rpm (nfpm's deb packager drops doc entries, and expands no
# glob in one; `contents:` is nfpm.yaml's last key); for deb the copyright file, the
# changelog STAGE/changelog.Debian.gz and the lintian overrides; for rpm the changelog
# STAGE/changelog.yml (both from packaging/changelog.sh). nfpm's `changelog:` would also write
# its own changelog.Debian.gz into a deb, one line per change with sub-items for the rest.
set -eu
cd "$(dirname "$0")/.."
format=${1-}
stage=${2-}
case $format in deb | rpm) ;; *) echo "usage: $0 deb|rpm STAGE" >&2; exit 2 ;; esac
[ -n "$stage" ] || { echo "usage: $0 deb|rpm STAGE" >&2; exit 2; }
tail -n 1 packaging/nfpm.yaml | grep -q '^  ' || {
	echo "nfpm-config.sh: packaging/nfpm.yaml must end with its contents: list" >&2
	exit 1
}
cat packaging/nfpm.yaml
# file SRC DST: one entry; documentation for rpm (rpmlint: not-listed-as-documentation).
file() {
	printf '  - src: ./%s\n    dst: %s\n' "$1" "$2"
	[ "$format" = deb ] || printf '    type: doc\n'
	printf '    file_info: {mode: 0644}\n'
}
file "$stage/diskprobe_exporter.1.gz" /usr/share/man/man1/diskprobe_exporter.1.gz
file LICENSE /usr/share/doc/diskprobe-exporter/LICENSE
file README.md /usr/share/doc/diskprobe-exporter/README.md
file systemd/devices.conf /usr/share/doc/diskprobe-exporter/examples/devices.conf
for f in docs/*.md; do
	[ -f "$f" ] || continue
	file "$f" "/usr/share/doc/diskprobe-exporter/${f#docs/}"
done
if [ "$format" = deb ]; then
	# Debian's machine-readable copyright file (DEP-5), the changelog, and lintian's overrides,
	# one a line, each with its reason.
	printf '  - src: ./packaging/copyright\n    dst: /usr/share/doc/diskprobe-exporter/copyright\n    file_info: {mode: 0644}\n'
	printf '  - src: ./%s/changelog.Debian.gz\n    dst: /usr/share/doc/diskprobe-exporter/changelog.Debian.gz\n    file_info: {mode: 0644}\n' "$stage"
	printf '  - src: ./packaging/lintian-overrides\n    dst: /usr/share/lintian/overrides/diskprobe-exporter\n    file_info: {mode: 0644}\n'
else
	printf '\nchangelog: %s/changelog.yml\n' "$stage"
fi
