// Package release tests `make release` (Makefile, docs/development.md "Releasing") from a clean
// clone of HEAD: the artifacts it writes for linux/amd64 and linux/arm64, that a second run
// gives the same bytes, and what each holds (ELF machine, package architecture, the image
// index's platforms, the chart's default image); and the release workflow against it.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

const image = "ghcr.io/diskprobe/diskprobe-exporter"

// arches are the release's architectures: Go's name, rpm's, and the ELF machine.
var arches = []struct {
	goarch, rpmarch string
	machine         elf.Machine
}{
	{"amd64", "x86_64", elf.EM_X86_64},
	{"arm64", "aarch64", elf.EM_AARCH64},
}

// need skips without the tools, or fails where the tools are required (make test as root,
// which installs them: scripts/ensure-deps.sh).
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Geteuid() == 0 || os.Getenv(framework.ToolsRequiredEnv) == "1" {
				t.Fatalf("needs %s (scripts/ensure-deps.sh installs it)", tool)
			}
			t.Skipf("needs %s (run `make test-deps` as root to install it)", tool)
		}
	}
}

// build is one `make release` from a clone of HEAD.
type build struct {
	clone, dist string
	semver, pkg string // packaging/version.sh --semver and without
	wall        time.Duration
	err         error
}

var (
	buildsOnce sync.Once
	builds     [2]*build
)

// releases runs `make release` in two clones of HEAD (one after the other: they share the
// Go build cache and the pinned tools), once per test binary.
func releases(t *testing.T) [2]*build {
	t.Helper()
	if testing.Short() {
		t.Skip("make release builds everything twice; -short skips it")
	}
	need(t, "make", "git", "go", "tar", "gzip")
	buildsOnce.Do(func() {
		root, err := os.MkdirTemp("", "diskprobe-release-")
		if err != nil {
			builds[0] = &build{err: err}
			builds[1] = builds[0]
			return
		}
		// Not t.TempDir: the builds outlive the first test that asks for them.
		tempDirs = append(tempDirs, root)
		tools := filepath.Join(root, "tools")
		for i := range builds {
			b := &build{clone: filepath.Join(root, fmt.Sprintf("clone%d", i))}
			builds[i] = b
			if out, err := exec.Command("git", "clone", "-q", testenv.RepoPath(), b.clone).CombinedOutput(); err != nil {
				b.err = fmt.Errorf("git clone: %v\n%s", err, out)
				continue
			}
			b.dist = filepath.Join(b.clone, "dist", "release")
			for _, v := range []struct {
				dst  *string
				args []string
			}{{&b.semver, []string{"--semver"}}, {&b.pkg, nil}} {
				out, err := exec.Command("sh", append([]string{filepath.Join(b.clone, "packaging", "version.sh")}, v.args...)...).Output()
				if err != nil {
					b.err = fmt.Errorf("version.sh: %v", err)
				}
				*v.dst = strings.TrimSpace(string(out))
			}
			start := time.Now()
			cmd := exec.Command("make", "-C", b.clone, "release", "RELEASE_TOOLS="+tools)
			cmd.Env = append(os.Environ(), "GOFLAGS=")
			out, err := cmd.CombinedOutput()
			b.wall = time.Since(start)
			if err != nil {
				b.err = fmt.Errorf("make release in %s: %v\n%s", b.clone, err, out)
			}
		}
	})
	for _, b := range builds {
		if b.err != nil {
			t.Fatal(b.err)
		}
	}
	return builds
}

var tempDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// TestReleaseIsReproducible: two runs of make release from two clones of one commit write the
// same files with the same SHA256SUMS, each file named where they differ.
func TestReleaseIsReproducible(t *testing.T) {
	b := releases(t)
	t.Logf("make release: %v, then %v (warm)", b[0].wall.Round(time.Second), b[1].wall.Round(time.Second))
	sums := [2]map[string]string{}
	for i := range b {
		sums[i] = readSums(t, b[i].dist)
	}
	for name, sum := range sums[0] {
		switch other, ok := sums[1][name]; {
		case !ok:
			t.Errorf("%s: only the first run wrote it", name)
		case other != sum:
			t.Errorf("%s differs between two runs from one commit: %s, %s", name, sum, other)
		}
	}
	for name := range sums[1] {
		if _, ok := sums[0][name]; !ok {
			t.Errorf("%s: only the second run wrote it", name)
		}
	}
}

// readSums reads dist/SHA256SUMS and checks it covers every file there, and only them.
func readSums(t *testing.T, dist string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[name] = sum
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := sums[e.Name()]; !ok && e.Name() != "SHA256SUMS" {
			t.Errorf("%s: not in SHA256SUMS (or not a file: make release leaves only the artifacts)", e.Name())
		}
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS")
	cmd.Dir = dist
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check in %s: %v\n%s", dist, err, out)
	}
	return sums
}

// artifacts are the names make release must write for version v (semver) and pkg.
func artifacts(semver, pkg string) []string {
	names := []string{"SHA256SUMS", "index.yaml", "diskprobe-exporter-" + semver + ".tgz", "diskprobe-exporter-" + semver + ".oci.tar"}
	for _, a := range arches {
		withSBOM := []string{
			"diskprobe_exporter-" + semver + ".linux-" + a.goarch + ".tar.gz",
			"diskprobe-exporter_" + pkg + "-1_" + a.goarch + ".deb",
			"diskprobe-exporter-" + pkg + "-1." + a.rpmarch + ".rpm",
		}
		for _, n := range withSBOM {
			names = append(names, n, n+".sbom.cdx.json")
		}
		names = append(names, "diskprobe-exporter-"+semver+".oci.tar.linux-"+a.goarch+".sbom.cdx.json")
	}
	sort.Strings(names)
	return names
}

// TestReleaseArtifacts: every artifact for both architectures, holding the right binary:
// the tarballs' ELF machines, the binaries' --version and `check` (arm64 under qemu-user),
// the packages' architecture fields and the ELF machine of their binaries, each SBOM's
// architecture.
func TestReleaseArtifacts(t *testing.T) {
	b := releases(t)[0]
	if regexp.MustCompile(`[~+]|dirty`).MatchString(b.semver) || b.pkg != strings.Replace(b.semver, "-", "~", 1) {
		t.Errorf("a clean clone's versions: %q and %q", b.semver, b.pkg)
	}
	entries, err := os.ReadDir(b.dist)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := artifacts(b.semver, b.pkg); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("make release wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	for _, a := range arches {
		t.Run(a.goarch, func(t *testing.T) {
			dir := "diskprobe_exporter-" + b.semver + ".linux-" + a.goarch
			files := untar(t, filepath.Join(b.dist, dir+".tar.gz"))
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			// Beside the binary, what a host without the package needs: the rules and
			// dashboards (README's rule_files and import), the Alertmanager routes and the
			// Kubernetes Jobs, which were only in a checkout.
			want := []string{"LICENSE", "README.md", "alerts/diskprobe.rules.yml", "dashboards/diskprobe-fleet.json",
				"dashboards/diskprobe-target.json", "diskprobe.yml", "diskprobe_exporter", "diskprobe_exporter.1.gz",
				"examples/alertmanager.yml", "examples/kubernetes/check-job.yaml", "examples/kubernetes/cleanup-job.yaml"}
			for i := range want {
				want[i] = dir + "/" + want[i]
			}
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Errorf("tarball holds %v, want %v", names, want)
			}
			bin := filepath.Join(t.TempDir(), "diskprobe_exporter")
			if err := os.WriteFile(bin, files[dir+"/diskprobe_exporter"], 0o755); err != nil {
				t.Fatal(err)
			}
			checkELF(t, "the tarball's binary", files[dir+"/diskprobe_exporter"], a.machine)
			runBinary(t, bin, a.goarch, b.pkg)

			need(t, "dpkg-deb", "rpm")
			deb := filepath.Join(b.dist, "diskprobe-exporter_"+b.pkg+"-1_"+a.goarch+".deb")
			if got := output(t, "dpkg-deb", "-f", deb, "Architecture"); got != a.goarch {
				t.Errorf("%s: Architecture %q, want %s", filepath.Base(deb), got, a.goarch)
			}
			data := output(t, "dpkg-deb", "--fsys-tarfile", deb)
			checkELF(t, "the .deb's /usr/bin/diskprobe_exporter", tarFile(t, []byte(data), "./usr/bin/diskprobe_exporter"), a.machine)
			rpmFile := filepath.Join(b.dist, "diskprobe-exporter-"+b.pkg+"-1."+a.rpmarch+".rpm")
			if got := output(t, "rpm", "-qp", "--queryformat", "%{ARCH} %{VERSION}-%{RELEASE}", rpmFile); got != a.rpmarch+" "+b.pkg+"-1" {
				t.Errorf("%s: %q, want %q", filepath.Base(rpmFile), got, a.rpmarch+" "+b.pkg+"-1")
			}
			need(t, "rpm2cpio", "cpio")
			rpmBin, err := exec.Command("sh", "-c", `rpm2cpio "$1" | cpio -i --quiet --to-stdout /usr/bin/diskprobe_exporter`, "sh", rpmFile).Output()
			if err != nil {
				t.Fatalf("rpm2cpio %s: %v", filepath.Base(rpmFile), err)
			}
			checkELF(t, "the .rpm's /usr/bin/diskprobe_exporter", rpmBin, a.machine)

			for _, art := range []string{dir + ".tar.gz", filepath.Base(deb), filepath.Base(rpmFile), "diskprobe-exporter-" + b.semver + ".oci.tar.linux-" + a.goarch} {
				checkSBOM(t, filepath.Join(b.dist, art+".sbom.cdx.json"), a.goarch, b.semver)
			}
		})
	}
}

func checkELF(t *testing.T, what string, data []byte, want elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not an ELF file: %v", what, err)
		return
	}
	if f.Machine != want {
		t.Errorf("%s: ELF machine %v, want %v", what, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked (has PT_INTERP), want static", what)
		}
	}
}

// runBinary runs the binary (amd64 natively, arm64 under qemu-aarch64-static): --version
// names the version, and `check` measures a temporary directory.
func runBinary(t *testing.T, bin, goarch, version string) {
	t.Helper()
	var prefix []string
	if goarch == "arm64" {
		if _, err := exec.LookPath("qemu-aarch64-static"); err != nil && os.Geteuid() != 0 {
			t.Log("arm64 binary not run: qemu-aarch64-static missing (Debian's qemu-user-static; make test-deps as root)")
			return
		}
		need(t, "qemu-aarch64-static")
		prefix = []string{"qemu-aarch64-static"}
	} else if goarch != "amd64" {
		return
	}
	run := func(args ...string) (string, error) {
		all := append(append([]string{}, prefix...), append([]string{bin}, args...)...)
		out, err := exec.Command(all[0], all[1:]...).CombinedOutput()
		return string(out), err
	}
	out, err := run("--version")
	if err != nil || !strings.Contains(out, "version "+version) {
		t.Errorf("%s --version: %v\n%s\nwant version %s", goarch, err, out, version)
	}
	dir := t.TempDir()
	out, err = run("check", "--size=256KiB", dir)
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Errorf("%s check %s: %v\n%s", goarch, dir, err, out)
	} else if !strings.Contains(out, "PASS") && !strings.Contains(out, "FAIL") {
		t.Errorf("%s check: no verdict\n%s", goarch, out)
	} else {
		t.Logf("%s check (%v): %s", goarch, prefix, verdictLine(out))
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%s check left %d files in %s", goarch, len(left), dir)
	}
}

// verdictLine is the line of check's output with its PASS or FAIL.
func verdictLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "PASS") || strings.Contains(l, "FAIL") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func checkSBOM(t *testing.T, path, goarch, semver string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component  struct{ Name, Version string }
			Properties []struct{ Name, Value string }
		}
		Components []struct{ Name string }
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Errorf("%s: %v", filepath.Base(path), err)
		return
	}
	arch := ""
	for _, p := range bom.Metadata.Properties {
		if p.Name == "cdx:gomod:build:env:GOARCH" {
			arch = p.Value
		}
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/diskprobe/diskprobe_exporter" ||
		bom.Metadata.Component.Version != "v"+semver || arch != goarch || len(bom.Components) < 5 {
		t.Errorf("%s: format %q, component %s %s, GOARCH %q, %d components; want CycloneDX of the exporter v%s for %s",
			filepath.Base(path), bom.BOMFormat, bom.Metadata.Component.Name, bom.Metadata.Component.Version, arch, len(bom.Components), semver, goarch)
	}
	if bytes.Contains(data, []byte(`goarch=`)) && !bytes.Contains(data, []byte(`goarch=`+goarch)) {
		t.Errorf("%s: purls name another goarch than %s", filepath.Base(path), goarch)
	}
}

// TestReleaseImageIndex: the image archive is one OCI image index, named
// ghcr.io/diskprobe/diskprobe-exporter:<semver>, with a linux/amd64 and a linux/arm64 image,
// each config naming its architecture and its layer holding a binary of that ELF machine.
func TestReleaseImageIndex(t *testing.T) {
	b := releases(t)[0]
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(b.dist, "diskprobe-exporter-"+b.semver+".oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range untarBytes(t, data) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" ||
		m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != image+":"+b.semver {
		t.Fatalf("the layout's index.json: %+v; want one image index named %s:%s", m.Manifests, image, b.semver)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Errorf("manifest %s has no platform", desc.Digest)
			continue
		}
		p := desc.Platform.OS + "/" + desc.Platform.Architecture
		seen[p] = true
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, p, img, b.pkg)
	}
	if len(seen) != len(arches) || !seen["linux/amd64"] || !seen["linux/arm64"] {
		t.Errorf("image index platforms %v, want linux/amd64 and linux/arm64", seen)
	}
	podmanLoad(t, filepath.Join(b.dist, "diskprobe-exporter-"+b.semver+".oci.tar"), image+":"+b.semver)
}

// podmanLoad imports the archive with Debian's podman (root): it must take the image index and
// store this machine's platform under the reference the archive names.
func podmanLoad(t *testing.T, archive, ref string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("podman load not tried: needs root")
		return
	}
	need(t, "podman")
	if exec.Command("podman", "image", "exists", ref).Run() == nil {
		t.Logf("podman load not tried: %s is already in podman's store", ref)
		return
	}
	if out, err := exec.Command("podman", "load", "-i", archive).CombinedOutput(); err != nil {
		t.Fatalf("podman load -i %s: %v\n%s", filepath.Base(archive), err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", ref).Run() })
	if got := output(t, "podman", "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", ref); got != "linux/"+runtime.GOARCH {
		t.Errorf("podman loaded %s for %s, want linux/%s", ref, got, runtime.GOARCH)
	}
}

func checkImage(t *testing.T, platform string, img v1.Image, version string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.OS + "/" + cf.Architecture; got != platform {
		t.Errorf("%s: image config says %s", platform, got)
	}
	if got := cf.Config.Labels["org.opencontainers.image.version"]; got != version {
		t.Errorf("%s: version label %q, want %q", platform, got, version)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: layers %d, %v; want 1", platform, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	layer, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	var machine elf.Machine
	for _, a := range arches {
		if "linux/"+a.goarch == platform {
			machine = a.machine
		}
	}
	checkELF(t, platform+": /bin/diskprobe_exporter", tarFile(t, layer, "bin/diskprobe_exporter"), machine)
}

// TestReleaseChart: the packaged chart, rendered with no --set, runs the published image at
// its appVersion, which is the release's version; index.yaml lists it at the release's URL.
func TestReleaseChart(t *testing.T) {
	b := releases(t)[0]
	chart := filepath.Join(b.dist, "diskprobe-exporter-"+b.semver+".tgz")
	out, err := exec.Command(framework.Helm(t), "template", "probe", chart, "--show-only", "templates/daemonset.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", filepath.Base(chart), err, out)
	}
	want := image + ":" + b.semver
	if !regexp.MustCompile(`(?m)^\s+image: "?` + regexp.QuoteMeta(want) + `"?$`).Match(out) {
		t.Errorf("helm template of the packaged chart does not run %s:\n%s", want, grep(string(out), "image:"))
	}
	out, err = exec.Command(framework.Helm(t), "show", "chart", chart).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Version, AppVersion string }
	if err := sigsyaml.Unmarshal(out, &c); err != nil || c.Version != b.semver || c.AppVersion != b.semver {
		t.Errorf("packaged Chart.yaml: version %q appVersion %q (%v), want %s", c.Version, c.AppVersion, err, b.semver)
	}

	data, err := os.ReadFile(filepath.Join(b.dist, "index.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Entries map[string][]struct {
			Version string
			URLs    []string
			Digest  string
		}
	}
	if err := sigsyaml.Unmarshal(data, &index); err != nil {
		t.Fatal(err)
	}
	e := index.Entries["diskprobe-exporter"]
	wantURL := "https://github.com/diskprobe/diskprobe_exporter/releases/download/v" + b.semver + "/diskprobe-exporter-" + b.semver + ".tgz"
	if len(e) != 1 || e[0].Version != b.semver || len(e[0].URLs) != 1 || e[0].URLs[0] != wantURL || e[0].Digest != readSums(t, b.dist)[filepath.Base(chart)] {
		t.Errorf("index.yaml entries %+v, want version %s at %s with the chart's sha256", e, b.semver, wantURL)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return untarBytes(t, data)
}

// untarBytes returns the regular files of a tar by name.
func untarBytes(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

func tarFile(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	files := untarBytes(t, data)
	f, ok := files[name]
	if !ok {
		t.Fatalf("no %s in the archive", name)
	}
	return f
}
