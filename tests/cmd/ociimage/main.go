// Command image writes the exporter's container image as an OCI archive, from the
// Containerfile and a build context, with no container engine: `make image` (this machine's
// architecture) and `make release` (one image index for several, -platform).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/ociimage"
)

func main() {
	containerfile := flag.String("f", "Containerfile", "Containerfile to read")
	context := flag.String("context", ".", "build context: where COPY sources are")
	ref := flag.String("t", "diskprobe-exporter:latest", "name:tag written into the archive")
	out := flag.String("o", "image.tar", "OCI archive to write")
	var buildArgs argList
	flag.Var(&buildArgs, "build-arg", "NAME=VALUE for an ARG of the Containerfile (repeatable)")
	var platforms platformList
	flag.Var(&platforms, "platform", "OS/ARCH=DIR: an image for that platform whose COPY sources are taken from DIR first, "+
		"then from -context (repeatable); with it, the archive holds one image index of them all")
	flag.Parse()

	if err := build(*containerfile, *context, *ref, *out, buildArgs.m, platforms); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(containerfile, context, ref, out string, buildArgs map[string]string, platforms platformList) error {
	spec, err := ociimage.Parse(containerfile, buildArgs)
	if err != nil {
		return err
	}
	if len(platforms) == 0 {
		img, err := spec.Image(context)
		if err != nil {
			return err
		}
		return ociimage.WriteArchive(out, ref, img)
	}
	images := map[ociimage.Platform]v1.Image{}
	for _, p := range platforms {
		img, err := spec.ImageFor(p.platform, p.dir, context)
		if err != nil {
			return fmt.Errorf("%s: %w", p.platform, err)
		}
		images[p.platform] = img
	}
	return ociimage.WriteIndexArchive(out, ref, images)
}

type argList struct{ m map[string]string }

func (a *argList) String() string { return "" }
func (a *argList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	if a.m == nil {
		a.m = map[string]string{}
	}
	a.m[k] = v
	return nil
}

type platformList []struct {
	platform ociimage.Platform
	dir      string
}

func (l *platformList) String() string { return "" }
func (l *platformList) Set(s string) error {
	p, dir, ok := strings.Cut(s, "=")
	if !ok || dir == "" {
		return fmt.Errorf("want OS/ARCH=DIR, got %q", s)
	}
	platform, err := ociimage.ParsePlatform(p)
	if err != nil {
		return err
	}
	for _, have := range *l {
		if have.platform == platform {
			return fmt.Errorf("platform %s given twice", platform)
		}
	}
	*l = append(*l, struct {
		platform ociimage.Platform
		dir      string
	}{platform, dir})
	return nil
}
