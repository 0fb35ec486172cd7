#!/bin/sh
# postinst (deb: "configure [old-version]", "abort-*") and %post (rpm: 1 = install, 2 = upgrade).
# Creates the system user and the state directory; enables the service; starts it (restarts it
# on upgrade) only where systemd is running, so installs in containers and chroots work.
set -e

unit=diskprobe_exporter.service
state=/var/lib/diskprobe_exporter

case "$1" in
	configure) [ -z "${2:-}" ] && fresh=yes || fresh=no ;;
	abort-upgrade | abort-remove | abort-deconfigure) fresh=no ;;
	1) fresh=yes ;;
	[2-9]*) fresh=no ;;
	*) exit 0 ;;
esac

if ! getent group diskprobe >/dev/null; then
	if command -v groupadd >/dev/null 2>&1; then
		groupadd --system diskprobe
	else
		addgroup --system diskprobe
	fi
fi
if ! getent passwd diskprobe >/dev/null; then
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	if command -v useradd >/dev/null 2>&1; then
		useradd --system --gid diskprobe --home-dir "$state" --no-create-home \
			--shell "$nologin" --comment "diskprobe_exporter" diskprobe
	else
		adduser --system --ingroup diskprobe --home "$state" --no-create-home \
			--shell "$nologin" --gecos "diskprobe_exporter" diskprobe
	fi
fi

# systemd creates it too (StateDirectory=), but the exporter must also run without systemd.
if [ ! -d "$state" ]; then
	install -d -o diskprobe -g diskprobe -m 0750 "$state"
fi

if command -v deb-systemd-helper >/dev/null 2>&1; then
	# The debhelper convention: enable on first install, remember an admin's "disable" across
	# upgrades; works in chroots too, so images built without a running systemd boot with it on.
	deb-systemd-helper unmask "$unit" >/dev/null || true
	if deb-systemd-helper --quiet was-enabled "$unit"; then
		deb-systemd-helper enable "$unit" >/dev/null || true
	else
		deb-systemd-helper update-state "$unit" >/dev/null || true
	fi
fi

[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload >/dev/null 2>&1 || true
if [ "$fresh" = yes ]; then
	command -v deb-systemd-helper >/dev/null 2>&1 || systemctl enable "$unit" >/dev/null 2>&1 || true
	systemctl start "$unit" || true
else
	systemctl try-restart "$unit" || true
fi
exit 0
