package vantage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeProc is a procfs with one process, 4242, named etcd, in the cgroups of a hybrid host
// whose hierarchies are mounted under root.
func fakeProc(t *testing.T) (procfs, root string) {
	root = t.TempDir()
	procfs = filepath.Join(root, "proc")
	write(t, filepath.Join(procfs, "self", "mountinfo"),
		"38 31 0:35 / "+root+"/blkio rw,relatime - cgroup cgroup rw,blkio\n"+
			"41 31 0:38 / "+root+"/unified rw,relatime - cgroup2 cgroup2 rw\n")
	write(t, filepath.Join(procfs, "4242", "comm"), "etcd\n")
	write(t, filepath.Join(procfs, "4242", "cgroup"), "7:blkio:/system.slice/etcd.service\n1:cpu,cpuacct:/\n0::/system.slice/etcd.service\n")
	return procfs, root
}

func TestCgroupsOfAProcessFoundFromItsProcfsAndTheMounts(t *testing.T) {
	procfs, root := fakeProc(t)
	m, err := readMounts(filepath.Join(procfs, "self", "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := readCgroups(filepath.Join(procfs, "4242", "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	var v View
	if err := m.place(&v, groups); err != nil {
		t.Fatal(err)
	}
	if v.BlkioDir != root+"/blkio/system.slice/etcd.service" || v.UnifiedDir != root+"/unified/system.slice/etcd.service" || v.V2 || v.BlkioPath != "/system.slice/etcd.service" {
		t.Fatalf("%+v", v)
	}
}

func TestOnAV2OnlyHostTheUnifiedCgroupIsTheOneToJoin(t *testing.T) {
	root := t.TempDir()
	mi := filepath.Join(root, "mountinfo")
	write(t, mi, "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
	m, err := readMounts(mi)
	if err != nil {
		t.Fatal(err)
	}
	var v View
	if err := m.place(&v, map[string]string{"": "/system.slice/etcd.service"}); err != nil {
		t.Fatal(err)
	}
	if !v.V2 || v.BlkioDir != "/sys/fs/cgroup/system.slice/etcd.service" {
		t.Fatalf("%+v", v)
	}
}

func TestAProcessNameMatchesTheKernelsFifteenByteComm(t *testing.T) {
	procfs, _ := fakeProc(t)
	write(t, filepath.Join(procfs, "77", "comm"), "kube-controller\n")
	r := &Resolver{ProcFS: procfs, Spec: Spec{Process: "kube-controller-manager"}, Self: 1}
	pid, err := r.pid()
	if err != nil || pid != 77 {
		t.Fatalf("pid %d, err %v", pid, err)
	}
	r = &Resolver{ProcFS: procfs, Spec: Spec{Process: "etcdctl"}, Self: 1}
	if _, err := r.pid(); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("got %v, want ErrNoProcess", err)
	}
}

func TestAPIDFileThatIsMissingOrStaleIsNoProcess(t *testing.T) {
	procfs, _ := fakeProc(t)
	dir := t.TempDir()
	for _, content := range []string{"", "garbage", "999999"} {
		f := filepath.Join(dir, "etcd.pid")
		write(t, f, content)
		if _, err := (&Resolver{ProcFS: procfs, Spec: Spec{PIDFile: f}}).pid(); !errors.Is(err, ErrNoProcess) {
			t.Errorf("pid file %q: %v, want ErrNoProcess", content, err)
		}
	}
	if _, err := (&Resolver{ProcFS: procfs, Spec: Spec{PIDFile: filepath.Join(dir, "none")}}).pid(); !errors.Is(err, ErrNoProcess) {
		t.Errorf("missing pid file: %v", err)
	}
	write(t, filepath.Join(dir, "good.pid"), "4242\n")
	if pid, err := (&Resolver{ProcFS: procfs, Spec: Spec{PIDFile: filepath.Join(dir, "good.pid")}}).pid(); err != nil || pid != 4242 {
		t.Errorf("pid %d, err %v", pid, err)
	}
}

func TestPressureTotalsAreMicroseconds(t *testing.T) {
	f := filepath.Join(t.TempDir(), "io.pressure")
	write(t, f, "some avg10=1.00 avg60=0.50 avg300=0.10 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=250\n")
	p, err := ReadPressure(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.Some != 1500*time.Millisecond || p.Full != 250*time.Microsecond || !p.HasFull {
		t.Fatalf("%+v", p)
	}
	if _, err := ReadPressure(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
}

func TestIOPrioIsWrittenAsIoniceWritesIt(t *testing.T) {
	for p, want := range map[IOPrio]string{ClassBE<<ioprioClassShift | 4: "be/4", ClassRT << ioprioClassShift: "rt/0", ClassIdle<<ioprioClassShift | 7: "idle", 0: "none"} {
		if p.String() != want {
			t.Errorf("%d: %s, want %s", p, p, want)
		}
	}
}
