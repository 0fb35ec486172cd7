#!/bin/sh
# make release's recipe (the Makefile's comment above `release:` lists what it writes and
# why each step is there; docs/development.md "Releasing"). The Makefile passes every value
# in the environment, so that the Makefile keeps one definition of each (VERSION, SEMVER,
# IMAGE, the pinned tools...) and this file only the steps. Run it through make:
#   make release [RELEASE_DIST=dir] [RELEASE_ARCHES='amd64 arm64']
# Reproducible: every time stamp is the commit's (SOURCE_DATE_EPOCH, BUILD_DATE), the build
# user fixed, the binaries -trimpath; tar sorts names, owner 0, gzip -n. `helm package`
# stamps each file with the current time and `helm repo index` the index, so both are
# rewritten with the commit's time.
set -eu
umask 022
for v in GO MAKE BINARY VERSION SEMVER REVISION RELEASE_DIST RELEASE_TOOLS RELEASE_ARCHES \
	RELEASE_TOOL_PKGS PACKAGE_STAGE IMAGE CHART_URL COMMIT_EPOCH; do
	eval "[ -n \"\${$v+set}\" ]" || { echo "packaging/release.sh: $v is not set; run make release" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p "$RELEASE_DIST" "$RELEASE_TOOLS"
d=$(cd "$RELEASE_DIST" && pwd)
b="$d/.build"
tools=$(cd "$RELEASE_TOOLS" && pwd)
image=${IMAGE##*/}
export SOURCE_DATE_EPOCH="$COMMIT_EPOCH" TZ=UTC

# What every build of the release carries (make build's ldflags): the branch is the tag at
# a release, else HEAD; the date the commit's.
branch=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || echo HEAD)
build_date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S 2>/dev/null || true)
release_make() {
	"$MAKE" --no-print-directory "$@" VERSION="$VERSION" SEMVER="$SEMVER" REVISION="$REVISION" \
		BRANCH="$branch" BUILD_USER=release@diskprobe BUILD_DATE="$build_date"
}

rm -rf "$d"
mkdir -p "$b/host" "$tools"
echo "release $SEMVER (packages $VERSION) into $RELEASE_DIST"
for p in $RELEASE_TOOL_PKGS; do GOBIN="$tools" GOFLAGS= $GO install "$p"; done
release_make build
mv "$BINARY" "$b/host/"

# Per architecture: the packages (make package), then the tarball.
for arch in $RELEASE_ARCHES; do
	(
		export GOOS=linux GOARCH="$arch"
		release_make package DIST="$d" NFPM="$tools/nfpm" MANPAGE_BINARY="$b/host/$BINARY"
	)
	t=$BINARY-$SEMVER.linux-$arch
	mkdir -p "$b/linux-$arch" "$b/$t"
	mv "$BINARY" "$b/linux-$arch/"
	install -m 0755 "$b/linux-$arch/$BINARY" "$b/$t/"
	install -m 0644 LICENSE README.md examples/diskprobe.yml "$PACKAGE_STAGE/$BINARY.1.gz" "$b/$t/"
	install -D -m 0644 -t "$b/$t/alerts" alerts/diskprobe.rules.yml
	install -D -m 0644 -t "$b/$t/dashboards" dashboards/*.json
	install -D -m 0644 -t "$b/$t/examples" examples/alertmanager.yml
	install -D -m 0644 -t "$b/$t/examples/kubernetes" examples/kubernetes/*.yaml
	tar -C "$b" --sort=name --mtime=@"$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=gnu -cf - "$t" | gzip -9n >"$d/$t.tar.gz"
done
rm -rf "$PACKAGE_STAGE"

# One OCI image index of every architecture's binary.
platforms=
for arch in $RELEASE_ARCHES; do platforms="$platforms -platform linux/$arch=$b/linux-$arch"; done
# shellcheck disable=SC2086 # $platforms is a list of flags
$GO -C tests run ./cmd/ociimage -f "$root/Containerfile" -context "$root" -t "$IMAGE:$SEMVER" \
	-o "$d/$image-$SEMVER.oci.tar" $platforms \
	--build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION"

# The chart, its files and index stamped with the commit's time.
"$tools/helm" package charts/diskprobe-exporter --version "$SEMVER" --app-version "$SEMVER" -d "$b/chart" >/dev/null
chart=diskprobe-exporter-$SEMVER.tgz
mkdir -p "$b/chart/x"
tar -C "$b/chart/x" -m -xzf "$b/chart/$chart"
tar -tzf "$b/chart/$chart" | tar -C "$b/chart/x" --no-recursion --mtime=@"$SOURCE_DATE_EPOCH" \
	--owner=0 --group=0 --numeric-owner --mode=0644 --format=ustar -cf - -T - | gzip -9n >"$d/$chart"
"$tools/helm" repo index "$d" --url "$CHART_URL"
stamp=$(date -u -d @"$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
sed -i -E "s/^(generated|    created): .*/\1: \"$stamp\"/" "$d/index.yaml"

# A CycloneDX SBOM beside each artifact that holds the binary.
for arch in $RELEASE_ARCHES; do
	case $arch in amd64) rpmarch=x86_64 ;; arm64) rpmarch=aarch64 ;; *) rpmarch=$arch ;; esac
	for a in "$d/$BINARY-$SEMVER.linux-$arch.tar.gz" "$d"/*_"$arch".deb "$d"/*."$rpmarch".rpm \
		"$d/$image-$SEMVER.oci.tar.linux-$arch"; do
		GOOS=linux GOARCH=$arch "$tools/cyclonedx-gomod" bin -json -noserial -version "v$SEMVER" \
			-output "$a.sbom.cdx.json" "$b/linux-$arch/$BINARY"
		sed -i -E "0,/\"timestamp\": \"[^\"]*\"/s//\"timestamp\": \"$stamp\"/" "$a.sbom.cdx.json"
	done
done
rm -rf "$b"

cd "$d"
find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS
echo "release: $RELEASE_DIST/"
cat SHA256SUMS
