#!/bin/sh
# Prints the daemon's packages, one ./dir a line, sorted: every package of this module that
# the binary links (go list -deps ./cmd/diskprobe_exporter), so a new package is on the list
# the moment main imports it, and test-only packages (internal/testenv) never are. The one
# list of them: make test-race runs it (RACE_PKGS), make lint's guards in .golangci.yml must
# name exactly these (tests/docs/daemonpackages_test.go fails, naming the package, until they
# do), and the same test checks that docs/development.md describes each and that the
# comment check (tests/docs/comments_test.go) reads them.
set -eu
cd "$(dirname "$0")/.."
module=$(${GO:-go} list -m)
${GO:-go} list -deps -f '{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{end}}{{end}}' ./cmd/diskprobe_exporter |
	sed -n "s,^$module/,./,p" | LC_ALL=C sort
