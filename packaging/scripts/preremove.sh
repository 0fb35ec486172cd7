#!/bin/sh
# prerm (deb: "remove", "upgrade", ...) and %preun (rpm: 0 = erase, 1 = upgrade).
# On removal: remember which probe files the config's targets have, while the binary and the
# config still exist (dpkg deletes both before postrm purge runs), then stop the units.
set -e

case "$1" in
	remove | 0) ;;
	*) exit 0 ;;
esac

state=/var/lib/diskprobe_exporter
config=/etc/diskprobe_exporter/diskprobe.yml

# The binary reads the config as the daemon does (any YAML style, path and probe_dir alike)
# and lists, one a line, only the files that carry its header in each target's .diskprobe/,
# then each such directory that holds nothing else. postremove.sh removes nothing else.
if [ -d "$state" ] && [ -f "$config" ] && [ -x /usr/bin/diskprobe_exporter ]; then
	/usr/bin/diskprobe_exporter --config.file="$config" cleanup --dry-run >"$state/.purge-files" 2>/dev/null || true
fi

if [ -d /run/systemd/system ]; then
	systemctl stop diskprobe_exporter.socket diskprobe_exporter.service >/dev/null 2>&1 || true
	if [ "$1" = 0 ]; then
		systemctl disable diskprobe_exporter.socket diskprobe_exporter.service >/dev/null 2>&1 || true
	fi
fi
exit 0
