#!/bin/sh
# prerm (deb: "remove", "upgrade", ...) and %preun (rpm: 0 = erase, 1 = upgrade).
# On removal: remember which probe directories the config names, while the config still
# exists (dpkg deletes conffiles before postrm purge runs), then stop the units.
set -e

case "$1" in
	remove | 0) ;;
	*) exit 0 ;;
esac

state=/var/lib/diskprobe_exporter
config=/etc/diskprobe_exporter/diskprobe.yml

# Only "path: /absolute/path" lines, optionally after "- " and optionally quoted, with plain
# characters; anything else (flow style, relative paths, "..", spaces, globs) is skipped.
# postremove.sh removes nothing but <path>/.diskprobe of the lines recorded here.
if [ -d "$state" ] && [ -f "$config" ]; then
	sed -n "s|^[[:space:]]*\(-[[:space:]]\{1,\}\)\{0,1\}path:[[:space:]]*[\"']\{0,1\}\(/[A-Za-z0-9._@+:/-]*\)[\"']\{0,1\}\([[:space:]]\{1,\}#.*\)\{0,1\}[[:space:]]*\$|\2|p" "$config" |
		grep -v -e '/\.\./' -e '/\.\.$' -e '^[/.]*$' >"$state/.purge-paths" || true
fi

if [ -d /run/systemd/system ]; then
	systemctl stop diskprobe_exporter.socket diskprobe_exporter.service >/dev/null 2>&1 || true
	if [ "$1" = 0 ]; then
		systemctl disable diskprobe_exporter.socket diskprobe_exporter.service >/dev/null 2>&1 || true
	fi
fi
exit 0
