#!/bin/sh
# postrm (deb: "remove", "purge", "upgrade", ...) and %postun (rpm: 0 = erase, 1 = upgrade).
# deb purge and rpm erase (rpm has no purge) delete the exporter's own data: the state
# directory and <path>/.diskprobe of the directory targets preremove.sh recorded. Nothing else.
# The diskprobe user stays, as Debian policy asks (its uid may still own files elsewhere).
set -e

unit=diskprobe_exporter.service
state=/var/lib/diskprobe_exporter

case "$1" in
	remove)
		[ -d /run/systemd/system ] && systemctl daemon-reload >/dev/null 2>&1 || true
		command -v deb-systemd-helper >/dev/null 2>&1 && deb-systemd-helper mask "$unit" >/dev/null || true
		exit 0
		;;
	purge | 0) ;;
	*) exit 0 ;;
esac

if [ -f "$state/.purge-paths" ]; then
	while IFS= read -r path; do
		dir=${path%/}/.diskprobe
		case $path in /* ) ;; *) continue ;; esac
		# A directory target's probe directory, never a symlink and never on a block device.
		if [ -d "$path" ] && [ -d "$dir" ] && [ ! -L "$dir" ]; then
			rm -rf -- "$dir"
		fi
	done <"$state/.purge-paths"
fi
rm -rf -- "$state"

if command -v deb-systemd-helper >/dev/null 2>&1; then
	deb-systemd-helper purge "$unit" >/dev/null || true
	deb-systemd-helper unmask "$unit" >/dev/null || true
fi
[ -d /run/systemd/system ] && systemctl daemon-reload >/dev/null 2>&1 || true
exit 0
