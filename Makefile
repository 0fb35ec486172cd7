# diskprobe_exporter — see README.md ("Working on the code") and docs/development.md. `make run` and `make test` are all a new machine needs.

GO          ?= go
BINARY      := diskprobe_exporter
PKG_VERSION := github.com/prometheus/common/version
# One version number (docs/development.md "Releasing"): the file VERSION holds the next release, X.Y.Z, tagged
# vX.Y.Z when made. RELEASE is it. packaging/version.sh spells a build's version two ways:
# VERSION is X.Y.Z at the tag and X.Y.Z~dev.<n>.g<sha> before it (what --version,
# diskprobe_exporter_build_info and the packages say; dpkg and rpm sort '~' first); SEMVER is
# the same with '-' for '~', X.Y.Z-dev.<n>.g<sha> (the image's tag and the chart's version: valid
# semver and OCI tag, sorting before X.Y.Z). A development build never carries the release's number.
RELEASE     := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
VERSION     ?= $(eval VERSION := $$(shell packaging/version.sh))$(VERSION)
SEMVER      ?= $(eval SEMVER := $$(shell packaging/version.sh --semver))$(SEMVER)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH      ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
BUILD_USER  ?= $(shell id -un)@$(shell hostname)
BUILD_DATE  ?= $(shell date -u +%Y%m%d-%H:%M:%S)
LDFLAGS     := -s -w \
  -X $(PKG_VERSION).Version=$(VERSION) \
  -X $(PKG_VERSION).Revision=$(REVISION) \
  -X $(PKG_VERSION).Branch=$(BRANCH) \
  -X $(PKG_VERSION).BuildUser=$(BUILD_USER) \
  -X $(PKG_VERSION).BuildDate=$(BUILD_DATE)
LISTEN      ?= :10052
TEST_TIMEOUT ?= 60m

.PHONY: all build run test test-deps test-k8s test-race lint fuzz bench package image release chart-files mixin tools clean

all: lint build test

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINARY) ./cmd/diskprobe_exporter

# Probes ./data inside the checkout with examples/diskprobe.yml.
run: build
	@mkdir -p data
	@port=$$(echo '$(LISTEN)' | sed 's/.*://'); \
	  echo "diskprobe_exporter: metrics at http://localhost:$$port/metrics (Ctrl-C to stop)"
	./$(BINARY) --config.file=examples/diskprobe.yml --web.listen-address=$(LISTEN)

# As root, also the pinned tools the tests run beside Debian's and the Debian root tests/systemd
# boots (scripts/tools.sh): built once per machine, reused by every clone. The tests then fail,
# not skip, when one is missing.
test-deps:
	@scripts/ensure-deps.sh
	@if [ "$$(id -u)" -eq 0 ]; then scripts/tools.sh prometheus k8s prometheus-operator kube-router local-path-provisioner debian-root >/dev/null; fi
TOOLS_REQUIRED := $(shell [ "$$(id -u)" -eq 0 ] && echo 1)

# Two modules: the daemon's at the top (its packages and their unit tests) and tests/ (the
# end-to-end and integration suites, benchmarks, alert replay, image builder and the tests of
# alerts/, charts/, dashboards/, docs/, mixin/ and packaging/), so the daemon's go.mod carries
# only what the daemon needs. test, lint and the tidy check cover both.

# Everything: the race tier, lint, unit tests, root-only kernel tests (loop devices, fsfreeze,
# blkio cgroups), rules, dashboards and packaging. Packages run one at a time (-p 1): the kernel
# tests time real I/O and must not share the disk with each other.
test: test-deps test-race lint
	$(GO) mod tidy -diff
	cd tests && $(GO) mod tidy -diff
	DISKPROBE_TOOLS_REQUIRED=$(TOOLS_REQUIRED) $(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd tests && DISKPROBE_TOOLS_REQUIRED=$(TOOLS_REQUIRED) $(GO) test -p 1 -count=1 -timeout $(TEST_TIMEOUT) ./...

# The Kubernetes tier alone (root): a single-node Kubernetes v1.34.1 brought up on this machine
# per package (tests/internal/k8senv) and the chart installed on it with the image make image
# builds (tests/charts/cluster). make test runs the same packages among tests/'s ./...
# K8S_PKGS are packages of the tests module.
K8S_PKGS ?= ./internal/k8senv ./charts/cluster
test-k8s:
	@if [ "$$(id -u)" -ne 0 ]; then \
	  echo "make test-k8s: must run as root (it runs a kubelet, containerd, loop devices and mounts)" >&2; exit 1; fi
	@scripts/ensure-deps.sh
	@scripts/tools.sh k8s prometheus-operator prometheus kube-router local-path-provisioner >/dev/null
	cd tests && DISKPROBE_TOOLS_REQUIRED=1 $(GO) test -p 1 -count=1 -timeout 30m -v $(K8S_PKGS)

# The daemon's packages (scripts/daemon-packages.sh: every package of this module the binary
# links), the one list the race tier and lint's guards read (.golangci.yml names the same,
# checked by tests/docs). Expanded only where used.
DAEMON_PKGS = $(shell GO='$(GO)' scripts/daemon-packages.sh)
# The daemon's packages under the race detector: the lock-free code (the latency histogram,
# the scheduler's snapshot, the in-flight atomics), whatever shares state with a scrape, and
# the rest of the daemon with it. -short skips what needs root (testenv.RequireRoot) or is long.
RACE_PKGS ?= $(DAEMON_PKGS)
test-race:
	$(GO) test -race -short -count=1 -timeout 10m $(RACE_PKGS)

# golangci-lint as a pinned module, outside go.mod: the first run downloads and compiles it
# (about 3 minutes here), later ones start from Go's build cache. .golangci.yml says what
# it checks and why each exclusion is there; its paths are relative to it, the top of the
# repository, in both modules. --allow-parallel-runners: by default a second golangci-lint on
# the machine (another checkout's make test) makes it exit 3 at once.
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.5.0
# actionlint checks .github/workflows (the release workflow), also as a pinned module.
ACTIONLINT ?= $(GO) run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd tests && $(GO) vet ./...
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...
	cd tests && $(GOLANGCI_LINT) run --allow-parallel-runners --config $(CURDIR)/.golangci.yml ./...
	$(ACTIONLINT)

# Each fuzz target for FUZZTIME: the configuration parser, and the HTTP handlers with
# arbitrary requests and telemetry paths (go test -fuzz takes one package and one target
# at a time).
FUZZTIME ?= 5m
fuzz:
	$(GO) test ./config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/diskprobe_exporter -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(FUZZTIME)

# Rewrites the benchmark report (docs/benchmarks/, BENCHMARKS.md) and tests/bench/plots/*.png
# (see tests/bench/doc.go): agreement with
# fio, CPU per operation, scrape cost, memory, disk budget, hot paths, check's queue-depth jobs
# against fio's libaio, a live etcd beside the exporter (34 minutes here); then the alert
# replay (tests/internal/alertreplay) splices in its section: detection times and false
# firings of every alert, 108 simulated days replayed through the shipped rules (24 minutes);
# then the end-to-end tests' timing goals (2 minutes); then the CPU the shipped rules cost
# Prometheus 3 at 1,000 and 10,000 synthetic targets with a backfilled week of the history they
# read (tests/bench/rulescale_test.go: about 25 minutes, ~10 GB of memory at its peak); then
# three live exporters, one on a throttled disk, paging through the shipped rules
# (tests/bench/livealert_test.go: 10 minutes); then a probe inside etcd's capped cgroup
# (tests/bench/vantage_test.go) and the device-ceiling scenario at the default probe rate
# (tests/bench/ceiling_test.go: 6 minutes); then the replay's scenarios beyond one Prometheus
# (tests/sharding: shards, Thanos Query, VictoriaMetrics with vmalert, 29 minutes; Thanos and
# VictoriaMetrics are built here, not by make test-deps, so that CI never compiles them: 10 and
# 2 minutes the first time on this machine). Root only (loop devices, blkio cgroups, mounts);
# about two and a half hours in all on this 2-CPU machine (80 minutes when measured idle on
# 2026-11-24, before the backfill, the live run and the sharding replay). All of it runs in
# the tests module; the plots come from tests/bench/plot, a module of its own, so that neither
# go.mod carries a plotting library.
BENCH_TIMEOUT ?= 60m
# The report is one file per section in docs/benchmarks/ and BENCHMARKS.md their index
# (tests/cmd/benchmarks), so that a run rewrites files there, not one 118 KB file at the
# root. The writers rewrite sections of one whole file by heading, as they always did:
# BENCH_REPORT, joined from docs/benchmarks/ first and split back into it at the end. A run
# that stops midway leaves what it measured in BENCH_REPORT, which `go -C tests run
# ./cmd/benchmarks split <its absolute path>` keeps. One writer alone: join into a file,
# point its DISKPROBE_BENCH_REPORT there, split that file.
BENCH_REPORT ?= dist/bench/BENCHMARKS.md
# End-to-end tests whose timing figures (round schedule, scrape p99) are judged only here, on a
# quiet machine; make test asserts what holds on any machine (tests/e2e/benchmode_test.go).
BENCH_TIMING_TESTS := TestScrapeLoadLosesNoScrapesOrRounds|TestManyTargetsHealthyOnesNotHeldByHungOrSlowOnes
bench:
	@if [ "$$(id -u)" -ne 0 ]; then \
	  echo "make bench: must run as root (it creates loop devices, blkio cgroups and mounts)" >&2; exit 1; fi
	@scripts/ensure-deps.sh prometheus-node-exporter=prometheus-node-exporter findmnt=util-linux etcd=etcd-server etcdctl=etcd-client
	@mkdir -p $(dir $(BENCH_REPORT)) && $(GO) -C tests run ./cmd/benchmarks join > $(BENCH_REPORT)
	cd tests && DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./bench -run '^TestBenchReport$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	cd tests && DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./internal/alertreplay -run '^TestReplayReport$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	cd tests && DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./e2e -run '^($(BENCH_TIMING_TESTS))$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	@scripts/tools.sh prometheus >/dev/null
	cd tests && DISKPROBE_BENCH_RULESCALE=1 DISKPROBE_TOOLS_REQUIRED=1 DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./bench -run '^TestRuleScale$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	cd tests && DISKPROBE_BENCH_LIVEALERT=1 DISKPROBE_TOOLS_REQUIRED=1 DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./bench -run '^TestLivePeerGroupPagesTheFailingDisk$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	cd tests && DISKPROBE_BENCH_VANTAGE=1 DISKPROBE_TOOLS_REQUIRED=1 DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./bench -run '^TestVantageAgreement$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	cd tests && DISKPROBE_BENCH_CEILING=1 DISKPROBE_TOOLS_REQUIRED=1 DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./bench -run '^TestCeilingReport$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	@scripts/tools.sh thanos victoriametrics >/dev/null
	cd tests && DISKPROBE_TOOLS_REQUIRED=1 DISKPROBE_BENCH_REPORT=$(abspath $(BENCH_REPORT)) $(GO) test ./sharding -run '^TestShardingReport$$' -count=1 -v -timeout $(BENCH_TIMEOUT)
	$(GO) -C tests run ./cmd/benchmarks split $(abspath $(BENCH_REPORT))
	cd tests/bench/plot && $(GO) run . -in ../plots/cdf.json -out ../plots

# .deb and .rpm into $(DIST)/ (packaging/nfpm.yaml). nfpm runs as a pinned module, outside
# go.mod. The packaged binary reports the package version (VERSION, from packaging/version.sh),
# so `dpkg -l`, `--version` and diskprobe_exporter_build_info agree.
DIST            ?= dist
PACKAGE_VERSION ?= $(VERSION)
NFPM            ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.0
PACKAGE_STAGE   := dist/.stage
# The man page is the binary's --help-man: make release, building for another architecture
# (GOARCH in the environment), names a binary this machine runs.
MANPAGE_BINARY  ?= ./$(BINARY)

package:
	@for f in LICENSE README.md; do \
	  [ -f "$$f" ] || { echo "make package: $$f is missing" >&2; exit 1; }; done
	@$(MAKE) --no-print-directory build VERSION='$(PACKAGE_VERSION)'
	@set -eu; umask 022; \
	  rm -rf $(PACKAGE_STAGE); \
	  mkdir -p $(PACKAGE_STAGE)/share/dashboards $(PACKAGE_STAGE)/share/alerts $(DIST); \
	  packaging/manpage.sh $(MANPAGE_BINARY) '$(PACKAGE_VERSION)' > $(PACKAGE_STAGE)/$(BINARY).1; \
	  gzip -9n $(PACKAGE_STAGE)/$(BINARY).1; \
	  for f in dashboards/*.json; do \
	    if [ -f "$$f" ]; then install -m 0644 "$$f" $(PACKAGE_STAGE)/share/dashboards/; fi; done; \
	  for f in alerts/*.yml; do \
	    case "$$f" in *test*) continue ;; esac; \
	    if [ -f "$$f" ]; then install -m 0644 "$$f" $(PACKAGE_STAGE)/share/alerts/; fi; done; \
	  packaging/changelog.sh deb '$(PACKAGE_VERSION)-1' > $(PACKAGE_STAGE)/changelog.Debian; \
	  gzip -9n $(PACKAGE_STAGE)/changelog.Debian; \
	  packaging/changelog.sh rpm '$(PACKAGE_VERSION)-1' > $(PACKAGE_STAGE)/changelog.yml; \
	  for p in deb rpm; do \
	    packaging/nfpm-config.sh $$p $(PACKAGE_STAGE) > $(PACKAGE_STAGE)/nfpm-$$p.yaml; \
	    GOARCH=$$($(GO) env GOARCH) PACKAGE_VERSION='$(PACKAGE_VERSION)' \
	      $(NFPM) package --config $(PACKAGE_STAGE)/nfpm-$$p.yaml --packager $$p --target $(DIST)/; \
	  done

# The container image as an OCI archive in $(DIST)/, built from Containerfile with no
# container engine (tests/cmd/ociimage, in the tests module with its container library;
# `podman load -i` or `skopeo copy oci-archive:` it), for this machine's architecture
# (make release builds both).
# Docker or Buildah users: `make build && docker build -f Containerfile .` gives the same image.
# The tag is SEMVER: the release (which the chart's appVersion names, so `helm install` with no
# image.tag finds it) only at an exact release tag, otherwise the development version
# X.Y.Z-dev.<n>.g<sha>; OCI tags can hold neither '~' nor '+', and the image's version label
# holds VERSION. IMAGE is where the release workflow publishes it (the chart's default).
IMAGE ?= ghcr.io/diskprobe/diskprobe-exporter
TAG   ?= $(SEMVER)
image: build
	@mkdir -p $(DIST)
	$(GO) -C tests run ./cmd/ociimage -f '$(CURDIR)/Containerfile' -context '$(CURDIR)' -t '$(IMAGE):$(TAG)' \
	  -o '$(abspath $(DIST))/$(notdir $(IMAGE))-$(TAG).oci.tar' --build-arg VERSION='$(VERSION)' --build-arg REVISION='$(REVISION)'
	@echo "image: $(DIST)/$(notdir $(IMAGE))-$(TAG).oci.tar ($(IMAGE):$(TAG))"
	@echo "helm install from this checkout: --set image.tag=$(TAG) (charts/diskprobe-exporter asks for $(RELEASE) otherwise)"

# make release: everything a release publishes, for linux/amd64 and linux/arm64, in
# $(RELEASE_DIST)/ (emptied first; docs/development.md "Releasing"):
#   diskprobe_exporter-<v>.linux-<arch>.tar.gz   static binary, LICENSE, README.md,
#                                                 examples/diskprobe.yml, man page, and what a
#                                                 host without the package needs beside them:
#                                                 alerts/, dashboards/, examples/alertmanager.yml,
#                                                 examples/kubernetes/ (the check and cleanup Jobs)
#   diskprobe-exporter_<pkgv>-1_<arch>.deb, diskprobe-exporter-<pkgv>-1.<rpmarch>.rpm  (make package)
#   diskprobe-exporter-<v>.oci.tar                one OCI image index, both architectures
#   diskprobe-exporter-<v>.tgz, index.yaml        the chart, version and appVersion <v>
#   <artifact>.sbom.cdx.json                      CycloneDX SBOM of each artifact holding the binary
#                                                 (cyclonedx-gomod bin: the modules linked in), the
#                                                 image's one per platform (.oci.tar.linux-<arch>.)
#   SHA256SUMS                                    over all of the above
# <v> is SEMVER, <pkgv> VERSION: the release at its tag, a development version elsewhere.
# Reproducible: two runs from one commit give the same bytes (packaging/release.sh, the
# recipe, says how).
# Why not GoReleaser and ko: GoReleaser would run the same nfpm over the same nfpm.yaml, and
# ko writes a multi-arch index only to a registry (or a docker daemon) and builds from Go
# packages, not from our Containerfile; nfpm and tests/cmd/ociimage already do the job.
RELEASE_DIST    ?= dist/release
RELEASE_ARCHES  ?= amd64 arm64
RELEASE_TOOLS   ?= dist/.tools
COMMIT_EPOCH    := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# Pinned modules, installed into $(RELEASE_TOOLS) (outside go.mod, from Go's build cache after
# the first run): programs for this machine while GOARCH names the target. cyclonedx-gomod takes
# the SBOM's purl goarch from its own environment, so it runs with the target's GOARCH.
RELEASE_TOOL_PKGS := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.0 helm.sh/helm/v3/cmd/helm@v3.19.0 \
  github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
# Where the release workflow serves the chart from (index.yaml's URLs): the release's assets.
CHART_URL       ?= https://github.com/diskprobe/diskprobe_exporter/releases/download/v$(SEMVER)
release:
	@GO='$(GO)' MAKE='$(MAKE)' BINARY='$(BINARY)' VERSION='$(VERSION)' SEMVER='$(SEMVER)' \
	  REVISION='$(REVISION)' RELEASE_DIST='$(RELEASE_DIST)' RELEASE_TOOLS='$(RELEASE_TOOLS)' \
	  RELEASE_ARCHES='$(RELEASE_ARCHES)' RELEASE_TOOL_PKGS='$(RELEASE_TOOL_PKGS)' \
	  PACKAGE_STAGE='$(PACKAGE_STAGE)' IMAGE='$(IMAGE)' CHART_URL='$(CHART_URL)' \
	  COMMIT_EPOCH='$(COMMIT_EPOCH)' packaging/release.sh

# The chart's copies of alerts/diskprobe.rules.yml and dashboards/*.json: real files, since helm
# warns on symlinks in a chart and a chart directory copied alone (vendored, pulled) has no
# alerts/ or dashboards/ beside it. alerts/ and dashboards/ stay the one source: edit there,
# then run this; tests/charts fails, naming the file, when a copy has drifted.
CHART_FILES := charts/diskprobe-exporter/files
chart-files:
	@mkdir -p $(CHART_FILES)/dashboards
	rm -f $(CHART_FILES)/diskprobe.rules.yml $(CHART_FILES)/dashboards/*.json
	install -m 0644 alerts/diskprobe.rules.yml $(CHART_FILES)/
	install -m 0644 dashboards/*.json $(CHART_FILES)/dashboards/

# mixin/out/: what mixin/mixin.libsonnet renders (rules and dashboards), with go-jsonnet.
JSONNET ?= $(GO) run github.com/google/go-jsonnet/cmd/jsonnet@v0.21.0
mixin:
	@mkdir -p mixin/out/dashboards
	$(JSONNET) -S -e 'std.manifestYamlDoc((import "mixin/mixin.libsonnet").prometheusRules)' > mixin/out/recording.rules.yml
	$(JSONNET) -S -e 'std.manifestYamlDoc((import "mixin/mixin.libsonnet").prometheusAlerts)' > mixin/out/alerts.rules.yml
	$(JSONNET) -m mixin/out/dashboards -e '(import "mixin/mixin.libsonnet").grafanaDashboards'

# The pinned programs the cluster and Prometheus 3 tests run — Kubernetes (apiserver,
# controller-manager, scheduler, kubelet, kubectl), prometheus-operator and its CRDs, Prometheus 3
# and promtool, kube-router, local-path-provisioner — built from the Go module proxy into a per-machine cache outside the clone
# (scripts/tools.sh says where and how). The first run compiles for about 45 minutes on a shared
# 2-core machine (44 CPU-minutes, niced); later runs, from any clone, print the bin directories
# at once.
tools:
	@scripts/tools.sh all

clean:
	rm -rf $(BINARY) dist mixin/out
