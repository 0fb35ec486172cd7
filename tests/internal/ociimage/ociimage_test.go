package ociimage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
