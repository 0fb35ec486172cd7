#!/bin/sh
# Usage: manpage.sh BINARY VERSION
# Prints the man page kingpin generates (--help-man), with a proper header: kingpin puts the
# whole multi-line `--version` text (build user, date, ...) into .TH, where man shows it above
# NAME, and leaves NAME without the "name \- summary" form whatis/apropos index.
set -eu
binary=$1 version=$2
page=$("$binary" --help-man)
printf '%s\n' "$page" | awk -v version="$version" '
	NR == 1 {
		print ".TH diskprobe_exporter 1 \"\" \"diskprobe_exporter " version "\" \"User Commands\""
		header = 1
		next
	}
	header && /^\.SH / { header = 0 }
	header { next }
	name == 1 && $0 == "diskprobe_exporter" {
		print "diskprobe_exporter \\- Prometheus exporter for continuous, rate-limited disk latency probes"
		name = 2
		next
	}
	/^\.SH "NAME"/ && !name { name = 1 }
	{ print }
'
