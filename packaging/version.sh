#!/bin/sh
# Prints the package version from `git describe`, in a form dpkg and rpm both accept and order
# correctly (no '-', which rpm forbids in a version):
#   v1.2.3 exactly             -> 1.2.3
#   4 commits after v1.2.3     -> 1.2.3+git4.<sha>        (sorts after 1.2.3)
#   v1.3.0-rc.1                -> 1.3.0~rc.1              (sorts before 1.3.0)
#   no tag yet                 -> 0.0.0~git<commits>.<sha> (sorts before any release)
#   uncommitted changes        -> ... .dirty appended
#   not a git checkout         -> 0.0.0
set -eu
cd "$(dirname "$0")/.."
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
		version=$version+git$count.$sha
	fi
	printf '%s%s\n' "$version" "$dirty"
elif sha=$(git rev-parse --short HEAD 2>/dev/null); then
	[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=.dirty
	printf '0.0.0~git%s.%s%s\n' "$(git rev-list --count HEAD)" "$sha" "$dirty"
else
	echo 0.0.0
fi
