package charts

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// hostMount is one hostPath volume as the container mounts it.
type hostMount struct {
	path     string
	typ      corev1.HostPathType
	readOnly bool
}

func hostMounts(t *testing.T, r *rendered) map[string]hostMount {
	t.Helper()
	spec := r.daemonSet.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]hostMount{}
	for _, vm := range spec.Containers[0].VolumeMounts {
		v := volumes[vm.Name]
		if v.HostPath == nil || vm.MountPath == "/host/proc" || vm.MountPath == "/host/sys" {
			continue
		}
		if vm.MountPath != v.HostPath.Path {
			t.Errorf("host path %s is mounted at %s, not at the same path", v.HostPath.Path, vm.MountPath)
		}
		var typ corev1.HostPathType
		if v.HostPath.Type != nil {
			typ = *v.HostPath.Type
		}
		mounts[vm.MountPath] = hostMount{path: v.HostPath.Path, typ: typ, readOnly: vm.ReadOnly}
	}
	return mounts
}

// TestDirectoryTargetsMountOnlyTheProbeDirectoryWritable: a directory target's path may be
// another program's data (etcd's), and the exporter only stats it: the pod must not be able
// to write there. Mounted read-only, whatever the values; writable only where the probe files
// go, a directory the kubelet creates for the exporter: probe_dir, else <path>/.diskprobe.
// Block devices are mounted read-only. A path without probe_dir used to be mounted
// read-write whole (`path: /var/lib/etcd` gave the pod write access to etcd's data).
func TestDirectoryTargetsMountOnlyTheProbeDirectoryWritable(t *testing.T) {
	cases := []struct {
		name     string
		files    []string
		set      []string
		readOnly []string // target paths
		writable []string // probe directories
	}{
		{name: "defaults", readOnly: []string{"/var/lib/diskprobe-exporter"}, writable: []string{"/var/lib/diskprobe-exporter/.diskprobe"}},
		{name: "etcd preset", files: []string{chartDir + "/values-etcd.yaml"},
			readOnly: []string{"/var/lib/etcd"}, writable: []string{"/var/lib/diskprobe-etcd"}},
		{name: "etcd without probe_dir", files: []string{chartDir + "/values-etcd.yaml", writeValues(t, "config: {targets: [{name: etcd, path: /var/lib/etcd}]}\n")},
			readOnly: []string{"/var/lib/etcd"}, writable: []string{"/var/lib/etcd/.diskprobe"}},
		{name: "raw device", files: []string{"testdata/rawdevice-values.yaml"},
			readOnly: []string{"/dev/nvme0n1", "/var/lib/diskprobe-exporter"}, writable: []string{"/var/lib/diskprobe-exporter/.diskprobe"}},
		{name: "trailing slash", files: []string{writeValues(t, "config: {targets: [{name: data, path: /srv/data/}]}\n")},
			readOnly: []string{"/srv/data/"}, writable: []string{"/srv/data/.diskprobe"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mounts := hostMounts(t, render(t, "probe", c.files, c.set))
			var ro, rw []string
			for p, m := range mounts {
				if m.readOnly {
					ro = append(ro, p)
				} else {
					rw = append(rw, p)
					if m.typ != corev1.HostPathDirectoryOrCreate {
						t.Errorf("writable %s is a hostPath of type %q, want a directory the kubelet creates (DirectoryOrCreate)", p, m.typ)
					}
					if filepath.Base(p) != ".diskprobe" && strings.Contains(c.name, "without probe_dir") {
						t.Errorf("writable %s without a probe_dir: only <path>/.diskprobe should be", p)
					}
				}
			}
			sort.Strings(ro)
			sort.Strings(rw)
			if strings.Join(ro, " ") != strings.Join(c.readOnly, " ") || strings.Join(rw, " ") != strings.Join(c.writable, " ") {
				t.Errorf("host mounts: read-only %v, writable %v; want read-only %v (the targets' paths), writable %v (only the probe directories)",
					ro, rw, c.readOnly, c.writable)
			}
			if m, ok := mounts["/dev/nvme0n1"]; ok && m.typ != corev1.HostPathBlockDev {
				t.Errorf("the device is a hostPath of type %q, want BlockDevice", m.typ)
			}
		})
	}
}

// TestDeviceTargetPodIsWhatNotesSay: a block device target makes the container privileged;
// NOTES.txt, which helm install prints, must say so and what it grants (root on the node,
// every device writable), name the device, and give the narrower route. Without a device,
// it says nothing of the kind.
func TestDeviceTargetPodIsWhatNotesSay(t *testing.T) {
	values := []string{"testdata/rawdevice-values.yaml"}
	r := render(t, "probe", values, nil)
	c := r.daemonSet.Spec.Template.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Fatalf("a block device target did not make the container privileged: %+v", c.SecurityContext)
	}
	if m := hostMounts(t, r)["/dev/nvme0n1"]; !m.readOnly || m.typ != corev1.HostPathBlockDev {
		t.Errorf("/dev/nvme0n1 is mounted %+v, want a read-only BlockDevice", m)
	}
	notes := notesRenderer(t)
	text := notes(true, values)
	for _, want := range []string{"Privileged pods: the block device target (/dev/nvme0n1) made the\ncontainer privileged",
		"root on the node", "every capability", "every device of the node readable and writable",
		"no seccomp or AppArmor", "device plugin", `"r"`, "privileged: false"} {
		if !strings.Contains(text, want) {
			t.Errorf("NOTES with a block device target do not say %q:\n%s", want, text)
		}
	}
	if text := notes(true, nil); strings.Contains(text, "Privileged") {
		t.Errorf("NOTES without a block device target speak of privileged pods:\n%s", text)
	}
	if text := notes(true, nil, "privileged=true"); !strings.Contains(text, "Privileged pods: privileged: true makes the") {
		t.Errorf("NOTES with privileged: true set by hand do not say what it grants:\n%s", text)
	}
}
