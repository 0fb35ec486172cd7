#!/bin/sh
# postrm (deb: "remove", "purge", "upgrade", ...) and %postun (rpm: 0 = erase, 1 = upgrade).
# deb purge and rpm erase (rpm has no purge) delete the exporter's own data: the state
# directory and the probe files of the targets preremove.sh listed. Nothing else.
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

# The probe files preremove.sh listed (`diskprobe_exporter cleanup --dry-run`), each checked
# again here: still a regular file, not a symlink, starting with the exporter's header (or
# empty: created, interrupted before the header). Then their .diskprobe directories, by
# rmdir: one holding anything else stays, and is named.
if [ -f "$state/.purge-files" ]; then
	while IFS= read -r f; do
		case $f in
			/*/.diskprobe)
				if [ -d "$f" ] && [ ! -L "$f" ] && ! rmdir -- "$f" 2>/dev/null; then
					echo "diskprobe-exporter: left $f: it holds files diskprobe_exporter did not create" >&2
				fi
				;;
			/*/.diskprobe/*)
				if [ -f "$f" ] && [ ! -L "$f" ] && { [ ! -s "$f" ] || [ "$(head -c 32 -- "$f")" = "diskprobe_exporter probe file v1" ]; }; then
					rm -f -- "$f"
				fi
				;;
		esac
	done <"$state/.purge-files"
fi
rm -rf -- "$state"

if command -v deb-systemd-helper >/dev/null 2>&1; then
	deb-systemd-helper purge "$unit" >/dev/null || true
	deb-systemd-helper unmask "$unit" >/dev/null || true
fi
[ -d /run/systemd/system ] && systemctl daemon-reload >/dev/null 2>&1 || true
exit 0
