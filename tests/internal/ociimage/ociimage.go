// Package ociimage builds the exporter's container image without a container engine: it
// reads the Containerfile (the one users build with Docker or Buildah) and applies the
// few instructions an image FROM scratch needs, so that both ways give the same image.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what a Containerfile says about the image.
type Spec struct {
	Copies     []Copy // in order
	User       string
	Ports      []string // "10052/tcp"
	Entrypoint []string
	Labels     map[string]string
}

// Copy is one COPY instruction: a file of the build context to a path in the image.
type Copy struct{ Src, Dst string }

// Parse reads a Containerfile FROM scratch. Instructions it does not apply are errors,
// naming the line, rather than being ignored: the two builds must not drift apart.
func Parse(containerfile string, buildArgs map[string]string) (*Spec, error) {
	data, err := os.ReadFile(containerfile)
	if err != nil {
		return nil, err
	}
	spec := &Spec{Labels: map[string]string{}}
	args := map[string]string{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		fail := func(format string, a ...any) (*Spec, error) {
			return nil, fmt.Errorf("%s:%d: %s: %s", containerfile, n, instr, fmt.Sprintf(format, a...))
		}
		expand := func(s string) string {
			return argRE.ReplaceAllStringFunc(s, func(m string) string { return args[strings.Trim(m, "${}")] })
		}
		switch strings.ToUpper(instr) {
		case "FROM":
			if rest != "scratch" {
				return fail("only FROM scratch is supported, not %q", rest)
			}
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if v, ok := buildArgs[name]; ok {
				def = v
			}
			args[name] = def
		case "COPY":
			f := strings.Fields(rest)
			if len(f) != 2 || strings.HasPrefix(f[0], "--") {
				return fail("want COPY SRC DST, got %q", rest)
			}
			spec.Copies = append(spec.Copies, Copy{Src: f[0], Dst: f[1]})
		case "USER":
			spec.User = expand(rest)
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				spec.Ports = append(spec.Ports, p)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &spec.Entrypoint); err != nil {
				return fail("want the exec form, a JSON array: %v", err)
			}
		case "LABEL":
			for _, m := range labelRE.FindAllStringSubmatch(rest, -1) {
				spec.Labels[m[1]] = expand(m[2])
			}
		default:
			return fail("not supported by make image (internal/ociimage)")
		}
	}
	if len(spec.Entrypoint) == 0 {
		return nil, fmt.Errorf("%s: no ENTRYPOINT", containerfile)
	}
	return spec, nil
}

var (
	argRE   = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	labelRE = regexp.MustCompile(`([A-Za-z0-9_.-]+)="([^"]*)"`)
)

// Image builds the image for this machine's architecture: one layer with the copied files
// (owned by root, mode kept, modification time the Unix epoch so that the same inputs give
// the same image).
func (s *Spec) Image(contextDir string) (v1.Image, error) {
	return s.ImageFor(Platform{OS: "linux", Architecture: goarch()}, contextDir)
}

// Platform is an image's os/architecture, as in linux/arm64.
type Platform struct{ OS, Architecture string }

// ParsePlatform reads "linux/arm64".
func ParsePlatform(s string) (Platform, error) {
	goos, arch, ok := strings.Cut(s, "/")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q: want OS/ARCH, e.g. linux/arm64", s)
	}
	return Platform{OS: goos, Architecture: arch}, nil
}

func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// ImageFor builds the image for platform p. Each COPY source is taken from the first of
// contextDirs that has it: a directory holding the platform's binary first, then the
// build context, so one Containerfile serves every architecture.
func (s *Spec) ImageFor(p Platform, contextDirs ...string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, c := range s.Copies {
		var src string
		var fi os.FileInfo
		var err error
		for _, dir := range contextDirs {
			src = filepath.Join(dir, c.Src)
			if fi, err = os.Stat(src); err == nil || !errors.Is(err, fs.ErrNotExist) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("COPY %s: not a regular file", c.Src)
		}
		dst := strings.TrimPrefix(filepath.Clean(c.Dst), "/")
		for d := filepath.Dir(dst); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		for _, d := range sortedDirs(dirs) {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
			dirs[d] = false
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: int64(fi.Mode().Perm()), Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config
	cfg.Entrypoint = s.Entrypoint
	cfg.User = s.User
	cfg.Labels = s.Labels
	cfg.ExposedPorts = map[string]struct{}{}
	for _, p := range s.Ports {
		cfg.ExposedPorts[p] = struct{}{}
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		return nil, err
	}
	cf, err = img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Architecture, v1.Time{Time: time.Unix(0, 0)}
	return mutate.ConfigFile(img, cf)
}

// dirs not yet written, parents first.
func sortedDirs(dirs map[string]bool) []string {
	var out []string
	for d, pending := range dirs {
		if pending {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// WriteArchive writes img as an OCI image layout in a tar file (podman load and skopeo
// read it as oci-archive), its index naming it ref (e.g. diskprobe-exporter:1.0.0).
func WriteArchive(path, ref string, img v1.Image) error {
	return writeLayout(path, func(p layout.Path) error {
		return p.AppendImage(img, layout.WithAnnotations(refName(ref)))
	})
}

// WriteIndexArchive writes images, one per platform, as one OCI image index in an OCI
// layout in a tar file, the layout's index naming it ref: `skopeo copy --all
// oci-archive:PATH docker://...` pushes every platform; podman and ctr import the one they run.
func WriteIndexArchive(path, ref string, images map[Platform]v1.Image) error {
	platforms := make([]Platform, 0, len(images))
	for p := range images {
		platforms = append(platforms, p)
	}
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].String() < platforms[j].String() })
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        images[p],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
	}
	return writeLayout(path, func(p layout.Path) error {
		return p.AppendIndex(idx, layout.WithAnnotations(refName(ref)))
	})
}

func refName(ref string) map[string]string {
	return map[string]string{"org.opencontainers.image.ref.name": ref}
}

func writeLayout(path string, add func(layout.Path) error) error {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := add(p); err != nil {
		return err
	}
	return tarDir(dir, path)
}

// tarDir writes the layout in dir as a tar file that depends on its content alone: names
// sorted, owner root, modes 0755/0644, modification time the Unix epoch.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, fi.Size()
		default:
			return fmt.Errorf("%s: not a file or directory", p)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
