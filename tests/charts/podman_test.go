package charts

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestImageRunsWithTheDaemonSetsOwnSettings builds the image with `make image`, loads it
// into Debian's podman (runc) and runs it with the args, env, mounts and security context
// of the DaemonSet the chart renders — translated from the rendered manifest, not written
// a second time — against a host directory and a loop device.
func TestImageRunsWithTheDaemonSetsOwnSettings(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "podman", "runc", "make")

	tag := "test-" + randomHex(4)
	ref := "localhost/diskprobe-exporter-test:" + tag
	archive := filepath.Join(t.TempDir(), "image.tar")
	out, err := exec.Command("make", "-C", testenv.RepoPath(), "image", "IMAGE=diskprobe-exporter-test", "TAG="+tag, "DIST="+filepath.Dir(archive)).CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	archive = filepath.Join(filepath.Dir(archive), "diskprobe-exporter-test-"+tag+".oci.tar")
	if fi, err := os.Stat(archive); err == nil {
		t.Logf("image archive %s: %.1f MiB", filepath.Base(archive), float64(fi.Size())/(1<<20))
	}
	podman(t, "load", "-i", archive)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", ref).Run() })

	dir := t.TempDir()
	dev := testenv.LoopDevice(t, 32<<20)
	// etcd's data directory on a disk of its own: the probe directory directly under the
	// mount point, which the container sees through a hostPath (a bind mount) of it.
	_, etcdDisk := testenv.LoopExt4(t, 64<<20)
	devSum := sha256File(t, dev)
	addr := framework.FreePort(t)
	_, port, _ := net.SplitHostPort(addr)
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`image: {repository: localhost/diskprobe-exporter-test, tag: %q}
hostNetwork: true
containerPort: %s
config:
  targets:
    - name: dir
      path: %s
      fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
      randread: {interval: 1s, ops: 5, file_size: 1MiB}
      limits:   {min_free: 1MiB}
    - name: loop
      path: %s
      randread: {interval: 1s, ops: 5}
    - name: etcd
      path: %s
      probe_dir: %s/diskprobe
      fsync:    {interval: 1s, ops: 5, file_size: 1MiB}
      limits:   {min_free: 1MiB}
`, tag, port, dir, dev, etcdDisk, etcdDisk)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := render(t, "probe", []string{values}, nil)
	args := podmanArgs(t, r)
	name := "diskprobe-test-" + tag
	podman(t, append([]string{"run", "-d", "--name", name}, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Logf("container log:\n%s", logs)
		}
		exec.Command("podman", "rm", "-f", "-t", "5", name).Run()
	})

	e := &framework.Exporter{Addr: addr}
	testenv.WaitFor(t, 60*time.Second, "samples from every target", func() bool {
		f, _, err := e.Scrape(5 * time.Second)
		if err != nil {
			return false
		}
		s, _ := framework.Value(f, "diskprobe_fdatasync_duration_seconds", map[string]string{"target": "dir"})
		rd, _ := framework.Value(f, "diskprobe_read_duration_seconds", map[string]string{"target": "loop"})
		es, _ := framework.Value(f, "diskprobe_fdatasync_duration_seconds", map[string]string{"target": "etcd"})
		return s >= 5 && rd >= 5 && es >= 5
	})
	f, _, err := e.Scrape(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := framework.Value(f, "diskprobe_target_info", map[string]string{"target": "loop", "device": filepath.Base(dev)}); !ok {
		t.Errorf("diskprobe_target_info of the loop device does not name %s", filepath.Base(dev))
	}
	if _, ok := framework.Value(f, "diskprobe_target_info", map[string]string{"target": "dir", "kind": "directory"}); !ok {
		t.Errorf("no diskprobe_target_info for the directory target")
	}

	var inspect []struct {
		HostConfig struct{ ReadonlyRootfs bool }
	}
	if err := json.Unmarshal([]byte(podman(t, "inspect", name)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman inspect: %v", err)
	}
	if !inspect[0].HostConfig.ReadonlyRootfs {
		t.Error("the container's root filesystem is not read-only")
	}
	// What changed in the container's own filesystem: only what the runtime made for the
	// mounts and the user (mount points, their parents, /etc/passwd and /etc/group).
	allowed := map[string]bool{"/etc/passwd": true, "/etc/group": true, "/etc/hosts": true, "/etc/resolv.conf": true, "/etc/hostname": true, "/run": true, "/run/.containerenv": true, "/dev": true, "/proc": true, "/sys": true}
	for _, m := range r.daemonSet.Spec.Template.Spec.Containers[0].VolumeMounts {
		for p := m.MountPath; p != "/"; p = filepath.Dir(p) {
			allowed[p] = true
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(podman(t, "diff", name)), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !allowed[f[1]] {
			t.Errorf("the container wrote %s in its own filesystem", line)
		}
	}
	podman(t, "stop", "-t", "5", name)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".diskprobe" {
			t.Errorf("the exporter wrote %s in the target directory, outside .diskprobe", e.Name())
		}
	}
	if entries, err := os.ReadDir(etcdDisk); err != nil || len(entries) != 2 || entries[0].Name() != "diskprobe" || entries[1].Name() != "lost+found" {
		t.Errorf("the disk mounted at the data directory holds %v (%v), want only diskprobe and lost+found", entries, err)
	}
	if _, err := os.Stat(filepath.Join(etcdDisk, "diskprobe", ".diskprobe", "fsync.probe")); err != nil {
		t.Errorf("the probe file is not in the probe directory under the mount point: %v", err)
	}
	if sha256File(t, dev) != devSum {
		t.Error("the loop device's contents changed")
	}
}

// podmanArgs translates the rendered DaemonSet's pod into `podman run` flags: the
// container's args and env, every volume mount (hostPath as a bind mount, the ConfigMap
// as a file), the security context, host networking, and the image.
func podmanArgs(t *testing.T, r *rendered) []string {
	t.Helper()
	spec := r.daemonSet.Spec.Template.Spec
	c := spec.Containers[0]
	// runc here can neither leave rlimits unset nor raise them once the capabilities are
	// dropped: pass explicit ones, no higher than this process's.
	var args []string
	for _, l := range []struct {
		name     string
		resource int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		var rl unix.Rlimit
		if err := unix.Getrlimit(l.resource, &rl); err != nil {
			t.Fatal(err)
		}
		n := min(rl.Cur, 4096)
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	if spec.HostNetwork {
		args = append(args, "--network", "host")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := volumes[m.Name]
		var src string
		switch {
		case v.HostPath != nil:
			src = v.HostPath.Path
			if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate {
				if err := os.MkdirAll(src, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		case v.ConfigMap != nil:
			cm, ok := r.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s names ConfigMap %s, which the chart does not render", m.Name, v.ConfigMap.Name)
			}
			src = filepath.Join(t.TempDir(), m.SubPath)
			if err := os.WriteFile(src, []byte(cm.Data[m.SubPath]), 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s: the test cannot translate %+v", m.Name, v.VolumeSource)
		}
		opt := src + ":" + m.MountPath
		if m.ReadOnly {
			opt += ":ro"
		}
		args = append(args, "-v", opt)
	}
	for _, e := range c.Env {
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only", "--read-only-tmpfs=false")
		}
		if sc.RunAsUser != nil {
			user := fmt.Sprint(*sc.RunAsUser)
			if sc.RunAsGroup != nil {
				user += fmt.Sprintf(":%d", *sc.RunAsGroup)
			}
			args = append(args, "--user", user)
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			args = append(args, "--security-opt", "no-new-privileges")
		}
		if sc.Privileged != nil && *sc.Privileged {
			args = append(args, "--privileged")
		}
		if caps := sc.Capabilities; caps != nil {
			for _, d := range caps.Drop {
				args = append(args, "--cap-drop", string(d))
			}
			for _, a := range caps.Add {
				args = append(args, "--cap-add", string(a))
			}
		}
	}
	args = append(args, c.Image)
	return append(args, c.Args...)
}

func podman(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("podman", append([]string{"--runtime", "runc"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
