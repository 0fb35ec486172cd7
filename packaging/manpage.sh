#!/bin/sh
# Usage: manpage.sh BINARY VERSION
# Prints the man page kingpin generates (--help-man), with a proper header: kingpin puts the
# whole multi-line `--version` text (build user, date, ...) into .TH, where man shows it above
# NAME, and leaves NAME without the "name \- summary" form whatis/apropos index. Then the
# sections kingpin cannot know: CONFIGURATION (every key and default, from the table of
# docs/configuration.md, which tests/docs/configuration_test.go checks against the code), FILES
# and SIGNALS (tests/packaging/manpage_test.go checks them).
set -eu
binary=$1 version=$2
reference=$(dirname "$0")/../docs/configuration.md
[ -r "$reference" ] || { echo "manpage.sh: $reference is missing" >&2; exit 1; }
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

# CONFIGURATION: the rows of the key table, each key with its default and meaning. Markdown
# code spans become bold; \& keeps a leading dot or quote from being read as a request.
cat <<'END'
.SH "CONFIGURATION"
The configuration file (\fB--config.file\fR) is YAML with one list, \fBtargets\fR. Each target takes the keys below. A probe key that is present turns that probe on, with the defaults below for the fields it leaves out; a target with no probe key gets the probes its kind is on for. Unknown keys are errors naming the file and line. Sizes take bytes or KiB, MiB, GiB, TiB; durations 15s, 10m, 1h30m. \fB--config.check\fR validates a file. Details: /usr/share/doc/diskprobe-exporter/configuration.md.
END
awk '
	/^### Every key and its default/ { on = 1; next }
	on && /^#/ { exit }
	on && /^\| `/ {
		n = split($0, c, "|")
		key = c[2]; def = c[3]; meaning = c[4]
		for (i = 5; i < n; i++) meaning = meaning "|" c[i]
		gsub(/^ +| +$/, "", key); gsub(/^ +| +$/, "", def); gsub(/^ +| +$/, "", meaning)
		gsub(/`/, "", key); gsub(/`/, "", def)
		gsub(/\\/, "\\e", meaning)
		while (match(meaning, /`[^`]*`/)) {
			meaning = substr(meaning, 1, RSTART - 1) "\\fB" substr(meaning, RSTART + 1, RLENGTH - 2) "\\fR" substr(meaning, RSTART + RLENGTH)
		}
		print ".TP"
		print "\\fB" key "\\fR (default: " def ")"
		print "\\&" meaning
	}
' "$reference"

cat <<'END'
.SH "FILES"
.TP
\fB/etc/diskprobe_exporter/diskprobe.yml\fR
The configuration (the default of \fB--config.file\fR): the targets and their probes.
.TP
\fB/etc/default/diskprobe_exporter\fR
\fBARGS=\fR, the flags the systemd unit passes.
.TP
\fB/usr/share/diskprobe_exporter/alerts/\fR
The alert and recording rules, for Prometheus's \fBrule_files\fR.
.TP
\fB/usr/share/diskprobe_exporter/dashboards/\fR
The Grafana dashboards (fleet overview, target detail), to import or provision.
.TP
\fB/usr/share/doc/diskprobe-exporter/\fR
README.md and the guides: runbook.md (what to do when an alert fires), troubleshooting.md (symptom, cause and fix), configuration.md, metrics.md, volumes.md (what cloud volumes are sold as, with sources), alerts.md, check.md, install.md, kubernetes.md, storage-classes.md (probing Kubernetes StorageClasses and how long their volumes take to arrive), design.md, reliability.md, security.md (what is exposed, what is refused, how to harden), development.md, measurements.md (the one-off measurements behind design choices).
.TP
\fB/var/lib/diskprobe_exporter/\fR
The service's state directory, which the default configuration probes.
.TP
\fIPATH\fB/.diskprobe/\fR
The probe files of a directory target (in its \fBprobe_dir\fR when set); \fBdiskprobe_exporter cleanup\fR removes them.
.SH "SIGNALS"
.TP
\fBSIGHUP\fR
Reload the configuration (as \fBPOST /-/reload\fR does where \fB--web.enable-lifecycle\fR is on). A file that does not load keeps the running configuration and sets \fBdiskprobe_config_last_reload_successful\fR to 0.
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop scheduling, wait up to 3 s in all for outstanding I/O, and exit within 5 s even when I/O is stuck in the kernel (the kernel may then keep the process as a zombie until that I/O returns). A reload under way is not applied. \fBcheck\fR stops its run at the next operation, removes its files and exits 2.
END
