#!/usr/bin/env bash
# Builds the pinned third-party programs the cluster and Prometheus tests run (Kubernetes,
# prometheus-operator, Prometheus 3) from the Go module proxy, once per machine, and prints
# where they are. Nothing of this enters the exporter's go.mod: each tool is built from a
# throwaway wrapper module in a temporary directory.
#
#   scripts/tools.sh TOOL...        build what is missing, print each TOOL's bin directory
#   scripts/tools.sh --cached TOOL  print the bin directory only if it is built (exit 3 if not)
#
# TOOL is k8s, prometheus-operator, prometheus, kube-router, local-path-provisioner or all; prometheus-operator-crds
# prints the directory holding the operator's CRDs. thanos and victoriametrics (victoria-metrics
# single-node and vmalert; neither in all) are what tests/bench's sharding replay runs the
# rules on beyond one Prometheus. debian-root (not in all) prints the root
# directory of a Debian 12 minbase system with systemd, made by debootstrap (as root) from the
# machine's own apt source, that tests/systemd copies and boots with systemd-nspawn; it is
# cached as debian-bookworm-<hash of suite, variant, packages and mirror>/root. The cache lives outside the clone, one directory per
# tool and version, so every clone on the machine shares it:
#
#   ${DISKPROBE_TOOLS_CACHE:-/var/cache/diskprobe-tools}/<tool>-<version>/bin
#
# A cache entry is built in a temporary directory beside it and renamed into place only when
# every binary has told its version, so an interrupted build leaves nothing that looks done.
# Compiles run under `nice -n 19`: the first Kubernetes build is about 22 CPU-minutes (31
# minutes on a shared 2-core machine), prometheus-operator 8, Prometheus 14 (peak 3.2 GB).
# Progress goes to stderr; stdout carries only the paths.
set -euo pipefail

KUBERNETES_VERSION=v1.34.1
PROMETHEUS_OPERATOR_VERSION=v0.88.0
PROMETHEUS_VERSION=v0.316.0 # Prometheus 3.x: the Go module's v0.3MM.P is release 3.MM.P
# kube-router's network policy controller enforces NetworkPolicies in the cluster tests. The
# proxy serves v2.1.0 and refuses the later v2 releases.
KUBE_ROUTER_VERSION=v2.1.0
# rancher/local-path-provisioner: the dynamic provisioner of the storage-class tests, run on
# the host as an out-of-cluster controller.
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30
# The newest releases whose go.mod this machine's Go (1.26.8, GOTOOLCHAIN=local) accepts:
# Thanos v0.42.5 asks for go >= 1.26.10, VictoriaMetrics v1.152.0 and later for go >= 1.27.1.
THANOS_VERSION=v0.42.4
VICTORIAMETRICS_VERSION=v1.151.0

CACHE=${DISKPROBE_TOOLS_CACHE:-/var/cache/diskprobe-tools}
GO=${GO:-go}

log() { echo "tools.sh: $*" >&2; }
die() { log "$*"; exit 1; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# Every temporary directory this run made, removed on any exit.
temps=()
cleanup() { [ ${#temps[@]} -eq 0 ] || rm -rf "${temps[@]}"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# module_dir MODULE VERSION: downloads MODULE@VERSION into the module cache and prints its
# directory. A module the proxy refuses (or one failing checksum verification) is named.
module_dir() {
  local mod=$1 ver=$2 out
  if ! out=$(cd / && GOFLAGS=-mod=mod "$GO" mod download -json "$mod@$ver" 2>&1); then
    log "the Go module proxy ($("$GO" env GOPROXY)) refused $mod@$ver, or it failed checksum verification:"
    # The error is a JSON string in -json mode; anything else go printed is passed on as is.
    printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/  \1/p' |
      sed 's/\\n\\t/\n    /g; s/\\n/\n  /g; s/\\"/"/g' >&2
    printf '%s\n' "$out" | grep -v '^[[:space:]]*["{}]' >&2 || true
    die "cannot build $mod $ver"
  fi
  printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

# local_replaces GOMOD: the modules that GOMOD replaces with a directory inside its own
# repository (k8s.io/kubernetes's staging modules, prometheus-operator's pkg/apis and
# pkg/client). Outside that repository they must come from the proxy instead.
local_replaces() {
  awk '/=>[[:space:]]*\.\.?\// { print ($1 == "replace") ? $2 : $1 }' "$1"
}

# module_replaces GOMOD: GOMOD's replacements by another module at a version (Thanos pins forks
# of gomemcache, galaxycache, kingpin and capnp this way), as go mod edit -replace arguments. A
# dependency's replace directives do not apply in the module that requires it, so a wrapper
# that should build what upstream releases must repeat them.
module_replaces() {
  "$GO" mod edit -json "$1" | awk '
    /"Replace":/ { inr = 1 }
    inr && /"Old":/ { side = "old" } inr && /"New":/ { side = "new" }
    inr && /"Path":/ { gsub(/[",]/, "", $2); p[side] = $2 }
    inr && /"Version":/ { gsub(/[",]/, "", $2); v[side] = $2 }
    inr && /^\t\t}/ { if (v["new"] != "") print "-replace=" p["old"] (v["old"] != "" ? "@" v["old"] : "") "=" p["new"] "@" v["new"]; delete p; delete v }'
}

# wrapper MODULE VERSION REPLACE_VERSION PACKAGE...: sets wrapper_dir to a temporary module
# that requires MODULE@VERSION, replaces each of its local-path replacements with the same
# module at REPLACE_VERSION, and blank-imports PACKAGE... in a tools file so that tidy
# resolves them. With wrapper_copy_replaces=1 the module's replacements by other modules
# (module_replaces) are repeated too.
wrapper() {
  local mod=$1 ver=$2 rver=$3; shift 3
  local src dir m
  src=$(module_dir "$mod" "$ver")
  dir=$(mktemp -d "${TMPDIR:-/tmp}/diskprobe-tools-mod.XXXXXX")
  temps+=("$dir")
  wrapper_dir=$dir
  (
    cd "$dir"
    "$GO" mod init diskprobe.invalid/tools >/dev/null 2>&1
    local edits=(-require="$mod@$ver")
    for m in $(local_replaces "$src/go.mod"); do edits+=(-replace="$m=$m@$rver"); done
    if [ "${wrapper_copy_replaces:-0}" = 1 ]; then
      for m in $(module_replaces "$src/go.mod"); do edits+=("$m"); done
    fi
    "$GO" mod edit "${edits[@]}"
    {
      echo '//go:build tools'
      echo
      echo '// Package tools pins the programs this throwaway module builds.'
      echo 'package tools'
      echo
      echo 'import ('
      printf '\t_ "%s"\n' "$@"
      echo ')'
    } >tools.go
    log "resolving $mod@$ver's dependencies (go mod tidy)"
    if ! GOFLAGS=-mod=mod nice -n 19 "$GO" mod tidy >tidy.log 2>&1; then
      cat tidy.log >&2
      die "go mod tidy failed for $mod@$ver: a module named above was refused by the proxy or failed verification"
    fi
  ) >&2
}

# build_into OUT MODDIR LDFLAGS TAGS PACKAGE...: one `go build` for all PACKAGEs, so the
# packages they share compile once.
build_into() {
  local out=$1 moddir=$2 ldflags=$3 tags=$4; shift 4
  log "compiling $* (nice -n 19; this is the long part)"
  (cd "$moddir" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 19 "$GO" build -trimpath \
    -tags "$tags" -ldflags "$ldflags" -o "$out/" "$@") >&2 ||
    die "go build failed in $moddir (see above)"
}

# version_of BINARY: BINARY's own account of its version; kubectl alone gives it as a subcommand.
version_of() {
  case ${1##*/} in
  kubectl) "$1" version --client ;;
  *) "$1" --version ;;
  esac
}

# cache_entry ENTRY MARKER BUILDER WHAT HINT: sets dir to $CACHE/ENTRY, first calling BUILDER
# STAGE, which must fill STAGE/MARKER, in a staging directory beside it that is renamed into
# place only when BUILDER succeeds. A lock keeps two concurrent runs from building the same
# entry twice. WHAT names the entry in messages; HINT is the command that builds it.
cache_entry() {
  local entry=$1 marker=$2 builder=$3 what=$4 hint=$5
  local final="$CACHE/$entry" stage
  if [ ! -d "$final/$marker" ]; then
    if [ "$cached_only" = 1 ]; then
      log "$what is not built yet (run $hint)"
      exit 3
    fi
    if ! { mkdir -p "$CACHE" 2>/dev/null && [ -w "$CACHE" ]; }; then
      die "cannot write the cache directory $CACHE (run as root, or set DISKPROBE_TOOLS_CACHE)"
    fi
    exec 9>"$CACHE/.$entry.lock"
    if ! flock -n 9; then
      log "another run is building $what; waiting for it"
      flock 9
    fi
    if [ ! -d "$final/$marker" ]; then
      # Holding the lock, any staging directory left is from a run that was killed.
      rm -rf "$CACHE/.$entry.building."*
      stage=$(mktemp -d "$CACHE/.$entry.building.XXXXXX")
      temps+=("$stage")
      "$builder" "$stage" "$final"
      chmod 0755 "$stage"
      mv -T "$stage" "$final"
      log "$what cached in $final ($(du -sh "$final" | cut -f1))"
    fi
    exec 9>&-
  fi
  dir=$final
}

# ensure NAME VERSION BUILDER: sets dir to NAME-VERSION's cache entry, first calling BUILDER
# STAGE (which fills STAGE/bin) when the cache lacks it.
ensure() {
  tool_name=$1 tool_version=$2 tool_builder=$3
  cache_entry "$1-$2" bin build_tool "$1 $2" "scripts/tools.sh $1"
}

# build_tool STAGE FINAL: the tool's builder, then a BUILDINFO in which every program built
# says its version (one that cannot is not cached).
build_tool() {
  local stage=$1 final=$2 start b out
  start=$(date +%s)
  log "building $tool_name $tool_version into $final (first time on this machine)"
  "$tool_builder" "$stage"
  {
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - start)) s"
    echo "go: $("$GO" env GOVERSION)"
  } >>"$stage/BUILDINFO"
  for b in "$stage"/bin/*; do
    if ! out=$(version_of "$b" 2>&1); then
      printf '%s\n' "$out" >&2
      die "${b##*/} does not tell its version: not caching $tool_name $tool_version"
    fi
    echo "${b##*/}: $(printf '%s\n' "$out" | head -1)" >>"$stage/BUILDINFO"
  done
}

build_k8s() {
  local stage=$1 ver=$KUBERNETES_VERSION minor flags='' kv key val
  # The staging modules (k8s.io/api, client-go, ...) are tagged v0.MINOR.PATCH for v1.MINOR.PATCH.
  wrapper k8s.io/kubernetes "$ver" "v0.${ver#v1.}" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
  minor=${ver#v1.}; minor=${minor%%.*}
  # What hack/lib/version.sh sets: --version says v1.34.1, and the apiserver's compatibility
  # version (derived from gitVersion) is 1.34 rather than a development default. The module
  # proxy's copy carries no git commit: gitCommit is left empty rather than "$Format:%H$".
  for kv in gitVersion="$ver" gitMajor=1 gitMinor="$minor" gitCommit= gitTreeState=clean \
    buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    key=${kv%%=*} val=${kv#*=}
    flags+=" -X k8s.io/component-base/version.$key=$val -X k8s.io/client-go/pkg/version.$key=$val"
  done
  build_into "$stage/bin" "$wrapper_dir" "-s -w$flags" "" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
  echo "module: k8s.io/kubernetes $ver (staging modules v0.${ver#v1.})" >"$stage/BUILDINFO"
}

# prometheus/common/version, which both Prometheus and prometheus-operator report.
common_version_flags() {
  local v=github.com/prometheus/common/version
  echo "-s -w -X $v.Version=$1 -X $v.Revision=unknown -X $v.Branch=$2 -X $v.BuildUser=diskprobe-tools -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
}

build_prometheus_operator() {
  local stage=$1 ver=$PROMETHEUS_OPERATOR_VERSION mod=github.com/prometheus-operator/prometheus-operator
  local src
  # pkg/apis/monitoring and pkg/client are modules of their own, tagged with the same version.
  wrapper "$mod" "$ver" "$ver" "$mod/cmd/operator"
  build_into "$stage/bin" "$wrapper_dir" "$(common_version_flags "${ver#v}" "$ver")" "" "$mod/cmd/operator"
  mv "$stage/bin/operator" "$stage/bin/prometheus-operator"
  src=$(module_dir "$mod" "$ver")
  mkdir -p "$stage/crds"
  cp "$src"/example/prometheus-operator-crd/*.yaml "$stage/crds/"
  chmod -R u+w,go-w "$stage/crds"
  echo "module: $mod $ver (crds: example/prometheus-operator-crd)" >"$stage/BUILDINFO"
}

build_prometheus() {
  local stage=$1 ver=$PROMETHEUS_VERSION mod=github.com/prometheus/prometheus src release
  wrapper "$mod" "$ver" "$ver" "$mod/cmd/prometheus" "$mod/cmd/promtool"
  src=$(module_dir "$mod" "$ver")
  release=$(cat "$src/VERSION" 2>/dev/null || echo "${ver#v}")
  # No builtinassets tag: the web UI's compiled assets (web/ui/static) are made by npm for
  # releases and are not in the module, so this server has its HTTP API but no UI pages.
  build_into "$stage/bin" "$wrapper_dir" "$(common_version_flags "$release" "$ver")" "" \
    "$mod/cmd/prometheus" "$mod/cmd/promtool"
  echo "module: $mod $ver (Prometheus $release; API only, no web UI assets)" >"$stage/BUILDINFO"
}

build_kube_router() {
  local stage=$1 ver=$KUBE_ROUTER_VERSION mod=github.com/cloudnativelabs/kube-router/v2
  wrapper "$mod" "$ver" "$ver" "$mod/cmd/kube-router"
  build_into "$stage/bin" "$wrapper_dir" "-s -w -X $mod/pkg/version.Version=$ver -X $mod/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "" \
    "$mod/cmd/kube-router"
  echo "module: $mod $ver" >"$stage/BUILDINFO"
}

build_local_path_provisioner() {
  local stage=$1 ver=$LOCAL_PATH_PROVISIONER_VERSION mod=github.com/rancher/local-path-provisioner
  # Its main package is the module's root; VERSION is what --version prints.
  wrapper "$mod" "$ver" "$ver" "$mod"
  build_into "$stage/bin" "$wrapper_dir" "-s -w -X main.VERSION=$ver" "" "$mod"
  echo "module: $mod $ver" >"$stage/BUILDINFO"
}

build_thanos() {
  local stage=$1 ver=$THANOS_VERSION mod=github.com/thanos-io/thanos
  wrapper_copy_replaces=1 wrapper "$mod" "$ver" "$ver" "$mod/cmd/thanos"
  # One binary: sidecar, store, query and rule are its subcommands. The tags are its release's
  # (.promu.yml): Thanos casts Prometheus's labels.Labels to its own label slices, which holds
  # only for the slicelabels layout; built with the default (stringlabels) its store API
  # servers panic on their first response ("makeslice: len out of range").
  build_into "$stage/bin" "$wrapper_dir" "$(common_version_flags "${ver#v}" "$ver")" "netgo slicelabels" "$mod/cmd/thanos"
  echo "module: $mod $ver (thanos sidecar, store, query, rule; tags netgo slicelabels)" >"$stage/BUILDINFO"
}

build_victoriametrics() {
  local stage=$1 ver=$VICTORIAMETRICS_VERSION mod=github.com/VictoriaMetrics/VictoriaMetrics
  wrapper "$mod" "$ver" "$ver" "$mod/app/victoria-metrics" "$mod/app/vmalert"
  # lib/buildinfo.Version is what -version prints, spelled as upstream's Makefile spells it.
  build_into "$stage/bin" "$wrapper_dir" "-s -w -X $mod/lib/buildinfo.Version=victoria-metrics-$ver-diskprobe-tools" "" \
    "$mod/app/victoria-metrics" "$mod/app/vmalert"
  echo "module: $mod $ver (single-node victoria-metrics and vmalert)" >"$stage/BUILDINFO"
}

# The Debian release, variant and packages of the debian-root tool; the mirror is the machine's
# own (DISKPROBE_DEBIAN_MIRROR overrides it).
DEBIAN_SUITE=bookworm
DEBIAN_INCLUDE=systemd,systemd-sysv,dbus

# debian_mirror: the first URI the machine's apt sources give for $DEBIAN_SUITE (one-line and
# deb822 formats), or deb.debian.org.
debian_mirror() {
  if [ -n "${DISKPROBE_DEBIAN_MIRROR:-}" ]; then echo "$DISKPROBE_DEBIAN_MIRROR"; return; fi
  local f m=''
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    m=$(awk -v suite="$DEBIAN_SUITE" '
      /^[[:space:]]*deb[[:space:]]/ { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit } }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (j = 2; j <= NF; j++) if ($j == suite && uri != "") { print uri; exit } }
      /^[[:space:]]*$/ { uri = "" }' "$f")
    [ -z "$m" ] || break
  done
  echo "${m:-http://deb.debian.org/debian}"
}

# ensure_debian_root: sets dir to the cached Debian root's entry (cache_entry), running
# debootstrap when it is missing.
ensure_debian_root() {
  local key
  debian_source=$(debian_mirror)
  key=$(printf '%s minbase %s %s %s\n' "$DEBIAN_SUITE" "$DEBIAN_INCLUDE" "$debian_source" "$(dpkg --print-architecture 2>/dev/null || uname -m)" |
    sha256sum | cut -c1-12)
  cache_entry "debian-$DEBIAN_SUITE-$key" root build_debian_root "the Debian $DEBIAN_SUITE root" "scripts/tools.sh debian-root as root"
}

# build_debian_root STAGE FINAL: debootstrap into STAGE/root.
build_debian_root() {
  local stage=$1 final=$2 start
  [ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
  command -v debootstrap >/dev/null || die "debootstrap not found (scripts/ensure-deps.sh installs it)"
  start=$(date +%s)
  log "debootstrap --variant=minbase --include=$DEBIAN_INCLUDE $DEBIAN_SUITE from $debian_source into $final (first time on this machine; minutes)"
  nice -n 19 debootstrap --variant=minbase --include="$DEBIAN_INCLUDE" "$DEBIAN_SUITE" "$stage/root" "$debian_source" >"$stage/debootstrap.log" 2>&1 || {
    tail -n 30 "$stage/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  }
  # No package lists or downloaded .debs: the root is copied for every test run.
  rm -rf "$stage/root/var/cache/apt/archives/"*.deb "$stage/root/var/lib/apt/lists/"*_Packages
  [ -x "$stage/root/lib/systemd/systemd" ] || die "debootstrap made no /lib/systemd/systemd"
  {
    echo "debootstrap --variant=minbase --include=$DEBIAN_INCLUDE $DEBIAN_SUITE $debian_source"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - start)) s"
    echo "systemd: $(chroot "$stage/root" dpkg-query -W -f '${Version}' systemd)"
  } >"$stage/BUILDINFO"
}

export GOWORK=off
cached_only=0
[ "${1-}" = --cached ] && { cached_only=1; shift; }
[ $# -gt 0 ] || usage
tools=()
for tool in "$@"; do
  case $tool in
  all) tools+=(k8s prometheus-operator prometheus kube-router local-path-provisioner) ;;
  k8s | kubernetes | prometheus-operator | prometheus-operator-crds | prometheus | kube-router | local-path-provisioner | debian-root | thanos | victoriametrics) tools+=("$tool") ;;
  *) usage ;;
  esac
done
# ensure runs as a command of its own, never in an && list, so that set -e holds inside it.
for tool in "${tools[@]}"; do
  case $tool in
  k8s | kubernetes) ensure kubernetes "$KUBERNETES_VERSION" build_k8s; echo "$dir/bin" ;;
  prometheus-operator) ensure prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" build_prometheus_operator; echo "$dir/bin" ;;
  prometheus-operator-crds) ensure prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" build_prometheus_operator; echo "$dir/crds" ;;
  prometheus) ensure prometheus "$PROMETHEUS_VERSION" build_prometheus; echo "$dir/bin" ;;
  kube-router) ensure kube-router "$KUBE_ROUTER_VERSION" build_kube_router; echo "$dir/bin" ;;
  local-path-provisioner) ensure local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" build_local_path_provisioner; echo "$dir/bin" ;;
  debian-root) ensure_debian_root; echo "$dir/root" ;;
  thanos) ensure thanos "$THANOS_VERSION" build_thanos; echo "$dir/bin" ;;
  victoriametrics) ensure victoriametrics "$VICTORIAMETRICS_VERSION" build_victoriametrics; echo "$dir/bin" ;;
  esac
done
