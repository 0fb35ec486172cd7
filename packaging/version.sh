#!/bin/sh
# Prints the version of a build: the release in the file VERSION (the next release, bumped just
# after tagging v$(cat VERSION)) and `git describe`. Two spellings of one version:
#   packaging/version.sh           the packages' and the binary's (--version, build_info): dpkg
#                                  and rpm order '~' before the release; rpm forbids '-'.
#   packaging/version.sh --semver  the image's tag and the chart's version and appVersion: valid
#                                  semver and OCI tag ('~' and '+' are neither), the
#                                  pre-release '-' sorting before the release.
# They differ only in that '~' is '-'. With VERSION holding 1.3.0:
#   at the tag v1.3.0                   -> 1.3.0                    1.3.0
#   4 commits after v1.2.3 (or no tag)  -> 1.3.0~dev.4.g<sha>       1.3.0-dev.4.g<sha>  (< 1.3.0)
#   at the tag v1.3.0-rc.1              -> 1.3.0~rc.1               1.3.0-rc.1          (< 1.3.0)
#   4 commits after v1.3.0-rc.1         -> 1.3.0~rc.1.dev.4.g<sha>  1.3.0-rc.1.dev.4.g<sha>
#   4 commits after v1.3.0 (not bumped) -> 1.3.1~dev.4.g<sha>       1.3.1-dev.4.g<sha>  (> 1.3.0)
#   uncommitted changes                 -> .dirty appended to the pre-release (~dirty, -dirty
#                                          at a release tag): never the release itself
#   not a git checkout                  -> 1.3.0 (a release tarball)
# "dev" sorts before "rc", so development builds before an rc sort before it. Without a VERSION
# file, 0.0.0 stands in for the release. <sha> is 12 hex digits, the same in every clone.
set -eu
semver=
case ${1-} in
--semver) semver=1 ;;
'') ;;
*) echo "usage: $0 [--semver]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
release=$(cat VERSION 2>/dev/null | tr -d ' \n') || release=
desc=$(git describe --tags --long --abbrev=12 --match 'v[0-9]*' --dirty 2>/dev/null) || desc=
dirty=
case $desc in *-dirty) dirty=1 desc=${desc%-dirty} ;; esac
# newer A B: A is a later release than B.
newer() {
	[ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$1" ]
}
if [ -n "$desc" ]; then
	sha=${desc##*-g}
	rest=${desc%-g*}
	count=${rest##*-}
	tag=${rest%-*}
	version=${tag#v} # X.Y.Z or X.Y.Z-pre
	if [ "$count" != 0 ]; then
		base=${version%%-*}
		if [ -n "$release" ] && newer "$release" "$base"; then
			# VERSION names the next release: before it.
			version=$release-dev.$count.g$sha
		elif [ "$base" != "$version" ]; then
			# After a pre-release tag: after it, before its release.
			version=$version.dev.$count.g$sha
		else
			# After the release tag, VERSION not bumped yet: before the next patch release.
			patch=${base##*.}
			version=${base%.*}.$((patch + 1))-dev.$count.g$sha
		fi
	fi
elif sha=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=1
	version=${release:-0.0.0}-dev.$(git rev-list --count HEAD).g$sha
else
	version=${release:-0.0.0}
fi
if [ -n "$dirty" ]; then
	case $version in
	*-*) version=$version.dirty ;;
	*) version=$version-dirty ;;
	esac
fi
if [ -z "$semver" ]; then
	version=$(printf '%s' "$version" | sed 's/-/~/')
fi
printf '%s\n' "$version"
