#!/bin/sh
# Prints the packages' changelog, generated from CHANGELOG.md (Keep a Changelog form):
#
#   packaging/changelog.sh deb VERSION-RELEASE   Debian changelog (changelog.Debian.gz, gzip -9n)
#   packaging/changelog.sh rpm VERSION-RELEASE   nfpm's changelog YAML, for the RPM %changelog
#
# The first section (## [Unreleased], or the release being built) becomes the entry of
# VERSION-RELEASE, dated with the commit date (SOURCE_DATE_EPOCH if set; the same commit gives
# the same bytes), unless the next section is VERSION-RELEASE's own; each older "## [X.Y.Z] - YYYY-MM-DD" section becomes the entry of X.Y.Z-1 on
# that date. Each "- " item of a section is one change, its Markdown links reduced to their
# text, wrapped at 78 columns (lintian: debian-changelog-line-too-long). The rest of
# CHANGELOG.md (prose, link references) is left out.
set -eu
cd "$(dirname "$0")/.."
format=${1-}
version=${2-}
case $format in deb | rpm) ;; *) echo "usage: $0 deb|rpm VERSION-RELEASE" >&2; exit 2 ;; esac
[ -n "$version" ] || { echo "usage: $0 deb|rpm VERSION-RELEASE" >&2; exit 2; }
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date -r CHANGELOG.md +%s)}
maintainer=$(sed -n 's/^maintainer: *//p' packaging/nfpm.yaml)
name=$(sed -n 's/^name: *//p' packaging/nfpm.yaml)

LC_ALL=C awk -v format="$format" -v version="$version" -v epoch="$epoch" \
	-v maintainer="$maintainer" -v name="$name" '
function flush_item() {
	if (item == "") return
	# [text](url) -> text
	while (match(item, /\[[^]]*\]\([^)]*\)/)) {
		link = substr(item, RSTART, RLENGTH)
		sub(/\]\(.*/, "", link)
		item = substr(item, 1, RSTART - 1) substr(link, 2) substr(item, RSTART + RLENGTH)
	}
	items[n_entries, ++n_items[n_entries]] = item
	item = ""
}
function wrap(text, first, rest, width,    words, nw, i, line, out) {
	nw = split(text, words, / +/)
	line = first
	out = ""
	for (i = 1; i <= nw; i++) {
		if (words[i] == "") continue
		if (line != first && line != rest && length(line) + 1 + length(words[i]) > width) {
			out = out line "\n"
			line = rest
		}
		line = (line == first || line == rest) ? line words[i] : line " " words[i]
	}
	return out line
}
/^## \[/ {
	flush_item()
	in_section = 1
	n_entries++
	if (n_entries == 1) {
		ver[1] = version
		date[1] = epoch
	} else {
		v = $2
		gsub(/[][]/, "", v)
		ver[n_entries] = v "-1"
		d = $4
		if (d !~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$/) {
			print "changelog.sh: no date (## [X.Y.Z] - YYYY-MM-DD) in: " $0 > "/dev/stderr"
			exit 1
		}
		date[n_entries] = d
	}
	next
}
/^\[[^]]*\]: / { flush_item(); in_section = 0; next }   # link references
!in_section { next }
/^#/ { flush_item(); next }
/^- / { flush_item(); item = substr($0, 3); next }
/^  +[^ ]/ && item != "" { t = $0; sub(/^ +/, "", t); item = item " " t; next }
{ flush_item() }
END {
	flush_item()
	if (n_entries == 0) { print "changelog.sh: no ## section in CHANGELOG.md" > "/dev/stderr"; exit 1 }
	# Building a release whose section follows an (empty) [Unreleased]: that section is the entry.
	first = (n_entries >= 2 && ver[2] == version) ? 2 : 1
	for (e = first; e <= n_entries; e++) {
		if (format == "deb") {
			printf "%s%s (%s) unstable; urgency=medium\n\n", (e > first ? "\n" : ""), name, ver[e]
			for (i = 1; i <= n_items[e]; i++) print wrap(items[e, i], "  * ", "    ", 78)
			if (n_items[e] == 0) print "  * No changes listed."
			printf "\n -- %s  %s\n", maintainer, rfc2822(date[e])
		} else {
			printf "- semver: \"%s\"\n  date: %s\n  packager: \"%s\"\n  changes:\n", ver[e], iso(date[e]), maintainer
			for (i = 1; i <= n_items[e]; i++) {
				print "    - note: |-"
				print wrap(items[e, i], "        ", "          ", 78)
			}
			if (n_items[e] == 0) print "    - note: No changes listed."
		}
	}
}
function rfc2822(d,    cmd, out) {
	cmd = "date -u -d " (d ~ /-/ ? d : "@" d) " \"+%a, %d %b %Y %H:%M:%S +0000\""
	cmd | getline out
	close(cmd)
	return out
}
function iso(d,    cmd, out) {
	cmd = "date -u -d " (d ~ /-/ ? d : "@" d) " +%Y-%m-%dT%H:%M:%SZ"
	cmd | getline out
	close(cmd)
	return out
}
' CHANGELOG.md
