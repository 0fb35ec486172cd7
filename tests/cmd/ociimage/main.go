// Command image writes the exporter's container image as an OCI archive, from the
// Containerfile and a build context, with no container engine: `make image`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/ociimage"
)

func main() {
	containerfile := flag.String("f", "Containerfile", "Containerfile to read")
	context := flag.String("context", ".", "build context: where COPY sources are")
	ref := flag.String("t", "diskprobe-exporter:latest", "name:tag written into the archive")
	out := flag.String("o", "image.tar", "OCI archive to write")
	var buildArgs argList
	flag.Var(&buildArgs, "build-arg", "NAME=VALUE for an ARG of the Containerfile (repeatable)")
	flag.Parse()

	if err := build(*containerfile, *context, *ref, *out, buildArgs.m); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(containerfile, context, ref, out string, buildArgs map[string]string) error {
	spec, err := ociimage.Parse(containerfile, buildArgs)
	if err != nil {
		return err
	}
	img, err := spec.Image(context)
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(out, ref, img)
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
