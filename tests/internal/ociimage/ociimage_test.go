package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestContainerfileIsWhatMakeImageBuilds: the shipped Containerfile parses into the image
// the chart and docs/kubernetes.md describe, and the image built from it carries that configuration.
func TestContainerfileIsWhatMakeImageBuilds(t *testing.T) {
	spec, err := Parse(testenv.RepoPath("Containerfile"), map[string]string{"VERSION": "1.2.3", "REVISION": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(spec.Entrypoint, []string{"/bin/diskprobe_exporter"}) || spec.User != "65534:65534" || !slices.Equal(spec.Ports, []string{"10052/tcp"}) {
		t.Errorf("entrypoint %v, user %q, ports %v", spec.Entrypoint, spec.User, spec.Ports)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version": "1.2.3", "org.opencontainers.image.revision": "abc",
		"org.opencontainers.image.licenses": "Apache-2.0", "org.opencontainers.image.source": "https://github.com/diskprobe/diskprobe_exporter",
	} {
		if spec.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, spec.Labels[k], want)
		}
	}

	ctx := t.TempDir()
	for _, c := range spec.Copies {
		if err := os.WriteFile(filepath.Join(ctx, c.Src), []byte("content of "+c.Src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img, err := spec.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, spec.Entrypoint) || cf.Config.User != spec.User || len(cf.Config.ExposedPorts) != 1 || cf.OS != "linux" {
		t.Errorf("image config %+v", cf.Config)
	}
	if err := WriteArchive(filepath.Join(t.TempDir(), "image.tar"), "diskprobe-exporter:test", img); err != nil {
		t.Fatal(err)
	}
}

func TestContainerfileInstructionsMakeImageCannotApplyAreRefused(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"FROM debian:12\nENTRYPOINT [\"/x\"]\n", ":1: FROM: only FROM scratch is supported"},
		{"FROM scratch\nRUN true\nENTRYPOINT [\"/x\"]\n", ":2: RUN: not supported by make image"},
		{"FROM scratch\nENTRYPOINT /x\n", ":2: ENTRYPOINT: want the exec form"},
		{"FROM scratch\nCOPY --chown=1 a /a\nENTRYPOINT [\"/x\"]\n", ":2: COPY: want COPY SRC DST"},
		{"FROM scratch\n", "no ENTRYPOINT"},
	} {
		path := filepath.Join(t.TempDir(), "Containerfile")
		if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(path, nil); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming the file and %q", c.file, err, c.want)
		}
	}
}

// TestIndexArchiveHoldsEachPlatformsBinaryAndIsByteStable: with a directory per platform, each
// image takes its binary from its own directory and the rest from the build context; the
// archive is the same bytes when written twice (make release's SHA256SUMS).
func TestIndexArchiveHoldsEachPlatformsBinaryAndIsByteStable(t *testing.T) {
	spec, err := Parse(testenv.RepoPath("Containerfile"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	for _, c := range spec.Copies {
		if err := os.WriteFile(filepath.Join(ctx, c.Src), []byte("context's "+c.Src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	images := map[Platform]v1.Image{}
	for _, arch := range []string{"amd64", "arm64"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "diskprobe_exporter"), []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := ParsePlatform("linux/" + arch)
		if err != nil {
			t.Fatal(err)
		}
		if images[p], err = spec.ImageFor(p, dir, ctx); err != nil {
			t.Fatal(err)
		}
		cf, err := images[p].ConfigFile()
		if err != nil || cf.Architecture != arch || cf.OS != "linux" {
			t.Fatalf("%s: config %s/%s (%v)", p, cf.OS, cf.Architecture, err)
		}
		layers, err := images[p].Layers()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		tr := tar.NewReader(rc)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
		_ = rc.Close()
		if files["bin/diskprobe_exporter"] != "binary for "+arch || files["LICENSE"] != "context's LICENSE" {
			t.Errorf("%s: layer holds %q", p, files)
		}
	}
	var sums []string
	for i := 0; i < 2; i++ {
		out := filepath.Join(t.TempDir(), "index.tar")
		if err := WriteIndexArchive(out, "diskprobe-exporter:test", images); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, fmt.Sprintf("%x", sha256.Sum256(data)))
	}
	if sums[0] != sums[1] {
		t.Errorf("two archives of the same images differ: %s, %s", sums[0], sums[1])
	}
	for _, bad := range []string{"linux", "linux/", "/arm64", "linux/arm64/v8"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q) accepted", bad)
		}
	}
}
