#!/bin/sh
# Prints the version of the binary, the packages and the image's labels: the release in the
# file VERSION (the next release, bumped just after tagging v$(cat VERSION)) and `git
# describe`, in a form dpkg and rpm both accept and order correctly (no '-', which rpm forbids
# in a version). With VERSION holding 1.3.0:
#   at the tag v1.3.0                     -> 1.3.0
#   4 commits after v1.2.3 (or no tag)    -> 1.3.0~git4.<sha>          (sorts before 1.3.0)
#   at the tag v1.3.0-rc.1                -> 1.3.0~rc.1                (sorts before 1.3.0)
#   4 commits after v1.3.0-rc.1           -> 1.3.0~rc.1+git4.<sha>
#   4 commits after v1.3.0 (not bumped)   -> 1.3.0+git4.<sha>          (sorts after 1.3.0)
#   uncommitted changes                   -> ... .dirty appended
#   not a git checkout                    -> 1.3.0 (a release tarball)
# Without a VERSION file, 0.0.0 stands in for the release and commits after a tag sort after it. The image's tag and the chart's
# appVersion are the release alone (OCI tags allow neither '~' nor '+'): see Makefile's TAG.
set -eu
cd "$(dirname "$0")/.."
release=$(cat VERSION 2>/dev/null | tr -d ' \n') || release=
desc=$(git describe --tags --long --match 'v[0-9]*' --dirty 2>/dev/null) || desc=
dirty=
case $desc in *-dirty) dirty=.dirty desc=${desc%-dirty} ;; esac
if [ -n "$desc" ]; then
	sha=${desc##*-g}
	rest=${desc%-g*}
	count=${rest##*-}
	tag=${rest%-*}
	version=$(printf '%s' "${tag#v}" | tr -- '-' '~')
	if [ "$count" != 0 ]; then
		base=${version%%~*}
		if [ -n "$release" ] && [ "$base" != "$release" ] &&
			[ "$(printf '%s\n%s\n' "$base" "$release" | sort -V | tail -n 1)" = "$release" ]; then
			# VERSION names the next release: before it.
			version=$release~git$count.$sha
		else
			# After the tag (VERSION not bumped yet, or no VERSION file).
			version=$version+git$count.$sha
		fi
	fi
	printf '%s%s\n' "$version" "$dirty"
elif sha=$(git rev-parse --short HEAD 2>/dev/null); then
	[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=.dirty
	printf '%s~git%s.%s%s\n' "${release:-0.0.0}" "$(git rev-list --count HEAD)" "$sha" "$dirty"
else
	echo "${release:-0.0.0}"
fi
