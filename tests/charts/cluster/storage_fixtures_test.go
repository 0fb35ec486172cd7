package cluster

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/k8senv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/ociimage"
)

// The storage classes of the cluster tier: rancher/local-path-provisioner (scripts/tools.sh
// builds it) running on the host as an out-of-cluster controller with the admin's kubeconfig,
// handing out directories of loop-device-backed filesystems, one per node and class; a class
// whose provisioner does not exist; and a class of pre-created local block PersistentVolumes.

const (
	// busyboxImage is Debian's static busybox as an image: the provisioner's helper pods run
	// its sh, mkdir and rm (nothing can be pulled).
	busyboxImage = "localhost/diskprobe-k8s-busybox:1"
	// localPathName is the provisioner's name (a StorageClass's provisioner field).
	localPathName = "diskprobe.test/local-path"
	// localPathNS is where its helper pods run (and its scripts' ConfigMap is).
	localPathNS = "dp-local-path"
	// classDiskSize is each node's filesystem of a class: room for the probe files and the
	// arrival prober's volumes, little memory (sparse, in /dev/shm).
	classDiskSize = 192 << 20
	// noProvisioner is a provisioner name nothing serves: its class's claims stay Pending.
	noProvisioner = "diskprobe.test/does-not-exist"
	// volumeDirMode is the mode the provisioner's setup script gives a volume's directory:
	// upstream's (deploy/local-path-storage.yaml), so that the chart meets what its users get.
	volumeDirMode = "0777"
)

var (
	busyboxOnce sync.Once
	busyboxErr  error
)

// importBusybox packs /bin/busybox (busybox-static: a static binary, so the image needs
// nothing else) as /bin/busybox and /bin/sh, and imports it into every node once.
func importBusybox(t *testing.T, e *env) {
	t.Helper()
	busyboxOnce.Do(func() { busyboxErr = buildBusybox(e) })
	if busyboxErr != nil {
		t.Fatal(busyboxErr)
	}
}

func buildBusybox(e *env) error {
	const bin = "/bin/busybox"
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s (Debian's busybox-static; make test-deps installs it): %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the helper image needs busybox-static's", bin)
		}
	}
	dir, err := os.MkdirTemp("", "diskprobe-k8s-busybox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), data, 0o755); err != nil {
		return err
	}
	// busybox runs the applet its argv[0] names: /bin/sh is its shell.
	spec := &ociimage.Spec{Copies: []ociimage.Copy{{Src: "busybox", Dst: "/bin/busybox"}, {Src: "busybox", Dst: "/bin/sh"}}, Entrypoint: []string{"/bin/sh"}}
	img, err := spec.Image(dir)
	if err != nil {
		return err
	}
	archive := filepath.Join(dir, "busybox.oci.tar")
	if err := ociimage.WriteArchive(archive, busyboxImage, img); err != nil {
		return err
	}
	return e.c.ImportImage(archive, busyboxImage)
}

// classDisk is one node's disk of a class.
type classDisk struct {
	dev, dir string
}

// localPath is the running provisioner and what it hands out.
type localPath struct {
	e *env
	// disks are each class's disk on each node: disks[class][node].
	disks   map[string]map[string]classDisk
	classes []string
	proc    *exec.Cmd
	done    chan struct{}
	log     string
}

// startLocalPath makes, for each class, a filesystem of its own on every node (a loop device,
// ext4, mounted under k8senv.SharedDir/sc/<class>/<node>), a StorageClass of that name
// (WaitForFirstConsumer, reclaimPolicy Delete) and runs local-path-provisioner on the host
// with a per-class node path map: a class's volume on a node is a directory of that node's
// disk of the class. Its helper pods run busyboxImage's sh in localPathNS with its default
// ServiceAccount (they need no API access: hostPath and a ConfigMap of scripts). In cleanup,
// after the tests' own cleanups: wait until the classes' PersistentVolumes are gone (the
// provisioner's teardown pods empty the directories), stop it by its pid, delete the classes,
// unmount and detach the disks.
func startLocalPath(t *testing.T, e *env, classes ...string) *localPath {
	t.Helper()
	start := time.Now()
	importBusybox(t, e)
	lp := &localPath{e: e, disks: map[string]map[string]classDisk{}, classes: classes}
	type nodePaths struct {
		Node  string   `json:"node"`
		Paths []string `json:"paths"`
	}
	type classConfig struct {
		NodePathMap []nodePaths `json:"nodePathMap"`
	}
	// A helper pod that fails is waited for until cmdTimeoutSeconds (default 120) before the
	// provisioner tries again.
	cfg := struct {
		CmdTimeoutSeconds   int                    `json:"cmdTimeoutSeconds"`
		StorageClassConfigs map[string]classConfig `json:"storageClassConfigs"`
	}{CmdTimeoutSeconds: 30, StorageClassConfigs: map[string]classConfig{}}
	for _, class := range classes {
		lp.disks[class] = map[string]classDisk{}
		var cc classConfig
		for _, n := range e.c.Nodes {
			dev, dir := e.c.SharedExt4(t, filepath.Join("sc", class, n.Name), classDiskSize)
			lp.disks[class][n.Name] = classDisk{dev: dev, dir: dir}
			cc.NodePathMap = append(cc.NodePathMap, nodePaths{Node: n.Name, Paths: []string{dir}})
		}
		cfg.StorageClassConfigs[class] = cc
	}
	disksUp := time.Since(start)

	dir := t.TempDir()
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// The file name must end in .json: the provisioner reads anything else as JSON text.
	cfgPath := filepath.Join(dir, "config.json")
	helperPath := filepath.Join(dir, "helperPod.yaml")
	for path, data := range map[string]string{cfgPath: string(cfgJSON), helperPath: fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: helper-pod}
spec:
  containers:
    - name: helper-pod
      image: %s
      imagePullPolicy: Never
`, busyboxImage)} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.namespace(t, localPathNS, "privileged")
	// The scripts the helper pods run with /bin/sh (mounted from this ConfigMap, which the
	// provisioner names by --configmap-name); the image has busybox and its sh only. The
	// teardown retries: a container that was writing in the volume may still be going away.
	apply(t, e, localPathNS, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: local-path-config}
data:
  setup: |-
    set -eu
    /bin/busybox mkdir -m %s -p "$VOL_DIR"
  teardown: |-
    set -u
    for i in 1 2 3 4 5; do /bin/busybox rm -rf "$VOL_DIR" && exit 0; /bin/busybox sleep 1; done
    exit 1
`, volumeDirMode))
	var scs strings.Builder
	for _, class := range classes {
		fmt.Fprintf(&scs, `---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: %s
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
`, class, localPathName)
	}
	apply(t, e, "", scs.String())
	t.Cleanup(func() {
		_, _ = e.c.KubectlErr(append([]string{"delete", "storageclass", "--ignore-not-found"}, classes...)...)
	})

	lp.log = filepath.Join(dir, "local-path-provisioner.log")
	logFile, err := os.Create(lp.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	bin := filepath.Join(framework.ToolDir(t, "local-path-provisioner"), "local-path-provisioner")
	lp.proc = exec.Command(bin, "--debug", "start", "--kubeconfig", e.c.Kubeconfig,
		"--config", cfgPath, "--helper-pod-file", helperPath, "--configmap-name", "local-path-config",
		"--namespace", localPathNS, "--service-account-name", "default",
		"--provisioner-name", localPathName, "--helper-image", busyboxImage)
	lp.proc.Stdout, lp.proc.Stderr = logFile, logFile
	// Killed with the test binary if it dies without its cleanups.
	lp.proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := lp.proc.Start(); err != nil {
		t.Fatal(err)
	}
	lp.done = make(chan struct{})
	go func() { _ = lp.proc.Wait(); close(lp.done) }()
	// Stopped by its pid, also on an interrupt (k8senv.Cleanup)...
	k8senv.Cleanup(t, func() {
		_ = lp.proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-lp.done:
		case <-time.After(15 * time.Second):
			_ = lp.proc.Process.Kill()
			<-lp.done
		}
		if t.Failed() {
			ev, _ := e.c.KubectlErr("-n", localPathNS, "get", "events", "--sort-by=.lastTimestamp")
			t.Logf("local-path-provisioner's log (tail):\n%s\nits helper pods' events:\n%s", lastLines(readFile(lp.log), 40), lastLines(ev, 30))
		}
	})
	// ...but on the way out of a test, only once its volumes are gone: their teardown pods
	// need it running (cleanups run last first).
	t.Cleanup(func() {
		if left := lp.waitVolumesGone(2 * time.Minute); len(left) > 0 {
			t.Errorf("PersistentVolumes of %v left 2m after their claims' deletion: %v", classes, left)
		}
	})
	t.Logf("storage classes %v: %d loop-backed filesystems in %v, provisioner started %v after the first",
		classes, len(classes)*len(e.c.Nodes), disksUp.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	return lp
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// volumes are the PersistentVolumes of the provisioner's classes (name -> class).
func (lp *localPath) volumes() (map[string]string, error) {
	out, err := lp.e.c.KubectlErr("get", "pv", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.storageClassName}{"\n"}{end}`)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	ours := map[string]bool{}
	for _, c := range lp.classes {
		ours[c] = true
	}
	pvs := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && ours[f[1]] {
			pvs[f[0]] = f[1]
		}
	}
	return pvs, nil
}

// waitVolumesGone waits until no PersistentVolume of the classes is left and returns those
// left after timeout.
func (lp *localPath) waitVolumesGone(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		pvs, err := lp.volumes()
		if err == nil && len(pvs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var left []string
			for pv, c := range pvs {
				left = append(left, pv+" ("+c+")")
			}
			if err != nil {
				left = append(left, err.Error())
			}
			sort.Strings(left)
			return left
		}
		time.Sleep(time.Second)
	}
}

// leftInDirs lists what is in the classes' directories besides ext4's lost+found: the
// provisioner's teardown removes each volume's directory.
func (lp *localPath) leftInDirs() []string {
	var left []string
	for class, nodes := range lp.disks {
		for node, d := range nodes {
			entries, err := os.ReadDir(d.dir)
			if err != nil {
				left = append(left, fmt.Sprintf("%s/%s: %v", class, node, err))
			}
			for _, en := range entries {
				if en.Name() != "lost+found" {
					left = append(left, filepath.Join(d.dir, en.Name()))
				}
			}
		}
	}
	sort.Strings(left)
	return left
}

// missingClass makes a StorageClass whose provisioner does not exist, deleted in cleanup.
func missingClass(t *testing.T, e *env, name string) {
	t.Helper()
	apply(t, e, "", fmt.Sprintf(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: %s
volumeBindingMode: Immediate
reclaimPolicy: Delete
`, name, noProvisioner))
	t.Cleanup(func() { _, _ = e.c.KubectlErr("delete", "storageclass", name, "--ignore-not-found") })
}

// blockClass is a class of pre-made local block volumes: one loop device per node, each a
// PersistentVolume (volumeMode Block, reclaimPolicy Retain: nothing provisions or deletes
// them) pinned to its node.
type blockClass struct {
	name string
	devs map[string]string // node -> device
	pvs  []string
}

// startBlockClass makes the class (kubernetes.io/no-provisioner, WaitForFirstConsumer) and a
// PersistentVolume per node over a loop device of size bytes; in cleanup the volumes, the class
// and the devices go (after the tests' own cleanups), and no loop device the kubelet made over
// them (it holds each mapped device open through one) may be left.
func startBlockClass(t *testing.T, e *env, name string, size int64) *blockClass {
	t.Helper()
	bc := &blockClass{name: name, devs: map[string]string{}}
	var docs strings.Builder
	fmt.Fprintf(&docs, `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
`, name)
	for _, n := range e.c.Nodes {
		dev := e.c.TestDisk(t, filepath.Join("block", name, n.Name), size)
		bc.devs[n.Name] = dev
		pv := name + "-" + n.Name
		bc.pvs = append(bc.pvs, pv)
		fmt.Fprintf(&docs, `---
apiVersion: v1
kind: PersistentVolume
metadata: {name: %s, labels: {diskprobe.test/class: %s}}
spec:
  capacity: {storage: %d}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: %s
  local: {path: %s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]
`, pv, name, size, name, dev, n.Name)
	}
	k8senv.Cleanup(t, func() {
		if out, err := e.c.KubectlErr("delete", "pv", "-l", "diskprobe.test/class="+name, "--ignore-not-found", "--wait=true", "--timeout=1m"); err != nil {
			t.Errorf("deleting the %s volumes: %v\n%s", name, err, out)
		}
		_, _ = e.c.KubectlErr("delete", "storageclass", name, "--ignore-not-found")
		if left := loopsOver(bc.devs); len(left) > 0 {
			t.Errorf("loop devices over %s's devices left: %v", name, left)
		}
	})
	apply(t, e, "", docs.String())
	return bc
}

// loopsOver lists the loop devices over one of devs, or over a path under a kubelet's root
// (a mapped block volume: the kubelet holds the device open through a loop device over its
// bind mount of it while a pod uses it).
func loopsOver(devs map[string]string) []string {
	out, _ := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	ours := map[string]bool{}
	for _, d := range devs {
		ours[d] = true
	}
	var left []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && (ours[f[1]] || strings.Contains(f[1], "/kubelet/")) {
			left = append(left, strings.Join(f, " "))
		}
	}
	return left
}

// containerCgroup is the pod's (first) container's own blkio cgroup, and the pids in it.
func containerCgroup(t *testing.T, n *k8senv.Node, pod corev1.Pod) (dir string, pids []string) {
	t.Helper()
	if len(pod.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", pod.Name)
	}
	id := pod.Status.ContainerStatuses[0].ContainerID
	id = id[strings.Index(id, "://")+3:]
	qos := strings.ToLower(string(pod.Status.QOSClass))
	dir = filepath.Join("/sys/fs/cgroup/blkio", n.CgroupRoot, "kubepods", qos, "pod"+string(pod.UID), id)
	if qos == "guaranteed" {
		dir = filepath.Join("/sys/fs/cgroup/blkio", n.CgroupRoot, "kubepods", "pod"+string(pod.UID), id)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Skipf("needs blkio cgroup v1 (the container's own cgroup): %v", err)
	}
	return dir, strings.Fields(string(data))
}

// throttleDeviceWrites limits the writes of the pod's container to dev to iops a second, in the
// container's own blkio cgroup (cgroup v1 throttles the processes of that very cgroup, not its
// children's), until the test ends. It returns the pids the limit holds, the container's.
func throttleDeviceWrites(t *testing.T, n *k8senv.Node, pod corev1.Pod, dev string, iops int) []string {
	t.Helper()
	dir, pids := containerCgroup(t, n, pod)
	if len(pids) == 0 {
		t.Fatalf("no process in %s", dir)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	num := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	file := filepath.Join(dir, "blkio.throttle.write_iops_device")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%s %d", num, iops)), 0o644); err != nil {
		t.Fatalf("throttling %s in %s: %v", num, dir, err)
	}
	k8senv.Cleanup(t, func() { _ = os.WriteFile(file, []byte(num+" 0"), 0o644) })
	return pids
}

// waitFor is testenv.WaitFor with the provisioner's log on failure.
func (lp *localPath) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, what, func() bool {
		select {
		case <-lp.done:
			t.Fatalf("local-path-provisioner exited (%v):\n%s", lp.proc.ProcessState, lastLines(readFile(lp.log), 30))
		default:
		}
		return cond()
	})
}

// TestStorageClassFixturesProvisionThrottleAndMapBlock proves the fixtures the storage-class
// test stands on, with busybox pods of its own: a claim of each local-path class binds to a
// directory of the pod's node's disk of that class, and is emptied and its volume deleted when
// the claim goes; a write limit on a pod's own container cgroup for its class's device of its
// node slows that pod's synced writes and not another's; a claim of the missing provisioner's
// class stays Pending; a local block volume is mapped into a pod and read; no loop device of
// the kubelet's is left after it.
func TestStorageClassFixturesProvisionThrottleAndMapBlock(t *testing.T) {
	e := setup(t)
	start := time.Now()
	lp := startLocalPath(t, e, "dp-fast", "dp-slow")
	missingClass(t, e, "dp-missing")
	bc := startBlockClass(t, e, "dp-block", 64<<20)
	fixtures := time.Since(start)
	ns := "dp-fixtures"
	e.namespace(t, ns, "privileged")
	node := e.c.Nodes[1]

	// Two writers on one node, one per class: each counts its synced 4 KiB writes (the count
	// renamed into place, so that it is never read half written).
	var docs strings.Builder
	for _, class := range []string{"dp-fast", "dp-slow"} {
		fmt.Fprintf(&docs, `---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s}
spec:
  storageClassName: %[1]s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s}
spec:
  nodeSelector: {kubernetes.io/hostname: %[2]s}
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
    - name: w
      image: %[3]s
      imagePullPolicy: Never
      command: [/bin/sh, -c, 'i=0; while :; do /bin/busybox dd if=/dev/zero of=/data/f bs=4096 count=1 conv=fsync 2>/dev/null; i=$((i+1)); echo $i > /data/count.new; /bin/busybox mv /data/count.new /data/count; done']
      volumeMounts: [{name: d, mountPath: /data}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: %[1]s}}]
`, class, node.Name, busyboxImage)
	}
	fmt.Fprintf(&docs, `---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: missing}
spec:
  storageClassName: dp-missing
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: block}
spec:
  storageClassName: dp-block
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: block}
spec:
  tolerations: [{operator: Exists}]
  terminationGracePeriodSeconds: 0
  containers:
    - name: r
      image: %s
      imagePullPolicy: Never
      command: [/bin/sh, -c, '/bin/busybox dd if=/dev/xvda of=/dev/null bs=4096 count=256 && /bin/busybox sleep 3600']
      volumeDevices: [{name: d, devicePath: /dev/xvda}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: block}}]
`, busyboxImage)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.c.KubectlErr("-n", ns, "describe", "pods,pvc")
			ev, _ := e.c.KubectlErr("-n", ns, "get", "events", "--sort-by=.lastTimestamp")
			t.Logf("%s\nevents:\n%s", out, ev)
		}
		_, _ = e.c.KubectlErr("-n", ns, "delete", "pods,pvc", "--all", "--wait=true", "--timeout=2m")
	})
	podStart := time.Now()
	apply(t, e, ns, docs.String())
	pods := map[string]corev1.Pod{}
	lp.waitFor(t, 3*time.Minute, "the writers and the block reader running", func() bool {
		for _, name := range []string{"dp-fast", "dp-slow", "block"} {
			var p corev1.Pod
			out, err := e.c.KubectlErr("-n", ns, "get", "pod", name, "-o", "json")
			if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
			pods[name] = p
		}
		return true
	})
	t.Logf("fixtures up in %v; PVCs bound and pods running %v after they were applied", fixtures.Round(100*time.Millisecond), time.Since(podStart).Round(100*time.Millisecond))

	// Each claim is a directory of its own class's disk on the pod's node.
	for _, class := range []string{"dp-fast", "dp-slow"} {
		d := lp.disks[class][node.Name].dir
		m, _ := filepath.Glob(filepath.Join(d, "pvc-*", "count"))
		if len(m) != 1 {
			t.Errorf("%s: want one volume directory with the writer's count in %s, got %v", class, d, m)
		}
	}
	if logs := e.c.Kubectl(t, "-n", ns, "logs", "block"); !strings.Contains(logs, "256+0 records in") {
		t.Errorf("the block pod did not read its device: %q", logs)
	}
	if phase := e.c.Kubectl(t, "-n", ns, "get", "pvc", "missing", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Errorf("the missing provisioner's claim is %q, want Pending", phase)
	}
	t.Logf("mapped block volumes: %v", loopsOver(bc.devs))

	// The limit on dp-slow's pod's container cgroup for dp-slow's device of that node.
	count := func(class string) int {
		var n int
		if m, _ := filepath.Glob(filepath.Join(lp.disks[class][node.Name].dir, "pvc-*", "count")); len(m) == 1 {
			data, _ := os.ReadFile(m[0])
			_, _ = fmt.Sscan(string(data), &n)
		}
		return n
	}
	rate := func() (fast, slow float64) {
		f0, s0 := count("dp-fast"), count("dp-slow")
		time.Sleep(5 * time.Second)
		return float64(count("dp-fast")-f0) / 5, float64(count("dp-slow")-s0) / 5
	}
	f1, s1 := rate()
	pids := throttleDeviceWrites(t, node, pods["dp-slow"], lp.disks["dp-slow"][node.Name].dev, 5)
	time.Sleep(time.Second)
	f2, s2 := rate()
	t.Logf("synced writes a second, fast/slow: %.1f/%.1f before, %.1f/%.1f with dp-slow's container (pids %v) limited to 5 write IOPS", f1, s1, f2, s2, pids)
	if !(s2*3 < s1 && f2*3 > f1) {
		t.Errorf("the limit did not slow dp-slow's writer alone: %.1f/%.1f before, %.1f/%.1f after", f1, s1, f2, s2)
	}

	// Claims gone: the provisioner empties and deletes their volumes; the kubelet unmaps.
	e.c.Kubectl(t, "-n", ns, "delete", "pods,pvc", "--all", "--wait=true", "--timeout=2m")
	if left := lp.waitVolumesGone(2 * time.Minute); len(left) > 0 {
		t.Errorf("volumes left after their claims' deletion: %v", left)
	}
	if left := lp.leftInDirs(); len(left) > 0 {
		t.Errorf("left in the classes' directories: %v", left)
	}
	testenv.WaitFor(t, time.Minute, "the kubelet's loop devices over the block volume gone", func() bool { return len(loopsOver(bc.devs)) == 0 })
	t.Logf("total %v", time.Since(start).Round(100*time.Millisecond))
}
