package k8senv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/ociimage"
)

// importPause builds ./pause as a static binary, packs it as the sandbox image and
// imports it into containerd (nothing can be pulled).
func (c *Cluster) importPause() error {
	dir, err := os.MkdirTemp("", "diskprobe-k8s-pause")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	_, self, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "pause"), ".")
	build.Dir = filepath.Join(filepath.Dir(self), "pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the pause binary: %v\n%s", err, out)
	}
	spec := &ociimage.Spec{Copies: []ociimage.Copy{{Src: "pause", Dst: "/pause"}}, Entrypoint: []string{"/pause"}}
	img, err := spec.Image(dir)
	if err != nil {
		return err
	}
	archive := filepath.Join(dir, "pause.oci.tar")
	if err := ociimage.WriteArchive(archive, PauseImage, img); err != nil {
		return err
	}
	return c.ImportImage(archive, PauseImage)
}

// ImportImage imports an OCI archive (what make image writes) into every node's containerd,
// in its k8s.io namespace, under ref: the name a pod's image normalizes to
// (docker.io/library/NAME:TAG for a bare NAME:TAG). ctr keeps the archive's own name, which
// the kubelet would not find.
func (c *Cluster) ImportImage(archive, ref string) error {
	for _, n := range c.Nodes {
		if err := n.ImportImage(archive, ref); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports an OCI archive into the node's containerd under ref (see
// Cluster.ImportImage).
func (n *Node) ImportImage(archive, ref string) error {
	out, err := n.Ctr("images", "import", "--digests", archive)
	if err != nil {
		return fmt.Errorf("%s: ctr images import %s: %v\n%s", n.Name, archive, err, out)
	}
	// The name the archive carries (org.opencontainers.image.ref.name), or the digest name.
	names, err := n.Ctr("images", "list", "-q")
	if err != nil {
		return err
	}
	for _, name := range splitLines(names) {
		if name == ref {
			return nil
		}
	}
	var src string
	for _, l := range splitLines(out) {
		// "unpacking NAME (sha256:...)...done"
		var name, rest string
		if _, err := fmt.Sscanf(l, "unpacking %s %s", &name, &rest); err == nil {
			src = name
		}
	}
	if src == "" {
		return fmt.Errorf("%s: ctr images import %s: cannot tell the imported image's name from %q", n.Name, archive, out)
	}
	if o, err := n.Ctr("images", "tag", "--force", src, ref); err != nil {
		return fmt.Errorf("%s: ctr images tag %s %s: %v\n%s", n.Name, src, ref, err, o)
	}
	return nil
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
