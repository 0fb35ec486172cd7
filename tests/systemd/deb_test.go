package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

const (
	pkgName  = "diskprobe-exporter"
	unit     = "diskprobe_exporter.service"
	config   = "/etc/diskprobe_exporter/diskprobe.yml"
	metrics  = "http://127.0.0.1:10052/metrics"
	etcdData = "/var/lib/etcd"
	etcdDir  = "/var/lib/diskprobe-etcd"
	dropIn   = "/etc/systemd/system/diskprobe_exporter.service.d"
)

// etcdTarget is docs/install.md's etcd target, with small probe files and short intervals so
// that samples come within seconds.
const etcdTarget = `
  - name: etcd
    path: /var/lib/etcd
    probe_dir: /var/lib/diskprobe-etcd
    fsync: {interval: 2s, ops: 2, file_size: 1MiB}
    randread: {interval: 2s, ops: 2, file_size: 1MiB}
`

// TestDebOnRealSystemd installs the .deb on a Debian 12 minbase system booted with its own
// systemd and walks a user's path through it: install (a previous version) → service
// active, samples served, `systemd-analyze security` as documented → the etcd target of
// docs/install.md, first without its drop-in (the reload is refused, the refusal and its
// hint in the journal, the old configuration serving), then with it (samples; etcd's
// directory unchanged) → a device target, failing without the drop-in (the unit has no disk
// group and no block device), probed with the shipped devices.conf → `systemctl reload` on a
// system with no /bin/kill → upgrade to the current version (the locally edited conffile
// kept, the service restarted) → `systemctl stop` within TimeoutStopSec → purge with the
// service running and a symlink the service user planted for root to write through (the
// victim unchanged; nothing of the package left; what stays is what the user made by hand,
// and docs/install.md names it).
func TestDebOnRealSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		need(t, "needs root: boots a Debian system with systemd-nspawn (run make test as root)")
	}
	for _, c := range []string{"systemd-nspawn", "nsenter", "curl", "make", "dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(c); err != nil {
			need(t, "%s not found: install the test dependencies with scripts/ensure-deps.sh (make test does)", c)
		}
	}
	cached := framework.ToolDir(t, "debian-root")
	root := testenv.RepoPath()
	phaseStart := time.Now()
	phase := func(done string) {
		t.Logf("%s: %.1fs", done, time.Since(phaseStart).Seconds())
		phaseStart = time.Now()
	}

	// --- The packages: this tree's version, and the same tree as a previous version.
	version := strings.TrimSpace(run(t, root, "sh", "packaging/version.sh"))
	prevVersion := version + "~prev"
	run(t, root, "dpkg", "--compare-versions", prevVersion, "lt", version)
	dist, prevDist := t.TempDir(), t.TempDir()
	run(t, root, "make", "package", "DIST="+dist)
	run(t, root, "make", "package", "DIST="+prevDist, "PACKAGE_VERSION="+prevVersion)
	deb := onlyFile(t, dist, "*.deb")
	prevDeb := onlyFile(t, prevDist, "*.deb")
	phase("make package (" + version + " and " + prevVersion + ")")

	// A block device for a device target: a loop device, bound into the guest.
	loop := testenv.LoopDevice(t, 32<<20)
	g := boot(t, cached, loop)
	phase("boot")
	for from, to := range map[string]string{deb: "root/new.deb", prevDeb: "root/prev.deb"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g.dir, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Reload must work without procps: the minimal system has no /bin/kill.
	if out := g.sh("for p in /bin/kill /usr/bin/kill; do [ -e $p ] && echo $p; done; true"); strings.TrimSpace(out) != "" {
		t.Fatalf("the guest has %s: it no longer shows that reload works without procps", out)
	}
	// The files of the system before the package: purge must bring it back to these, but for
	// what the user made by hand.
	before := g.files()

	// --- Install: dpkg -i with no network; Depends must be on a minimal system already.
	out := g.sh("dpkg -i /root/prev.deb")
	t.Logf("dpkg -i %s:\n%s", filepath.Base(prevDeb), out)
	waitActive(t, g)
	waitFor(t, "samples of the default target", 2*time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && sample(m, `diskprobe_fdatasync_duration_seconds_count{target="varlib"}`) > 0, m
	})
	m, _ := g.get(metrics)
	if !strings.Contains(m, `version="`+prevVersion+`"`) {
		t.Errorf("diskprobe_exporter_build_info does not name %s", prevVersion)
	}
	phase("install, active, samples")

	// --- No disk group and no block device by default: the group reads every disk, hence
	// every file, and the default configuration probes none.
	if got := g.show("SupplementaryGroups"); got != "" {
		t.Errorf("the default unit has SupplementaryGroups=%s, want none", got)
	}
	if got := g.sh("systemctl show -p DeviceAllow " + unit); strings.Contains(got, "block") || strings.Contains(got, "/dev/") {
		t.Errorf("the default unit allows block devices:\n%s", got)
	}
	if got := g.show("DevicePolicy"); got != "closed" {
		t.Errorf("DevicePolicy=%s, want closed", got)
	}

	// --- systemd-analyze security on the real systemd, as docs/install.md states it.
	out, _ = g.run(time.Minute, "systemd-analyze", "security", "--no-pager", unit)
	mExp := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unit) + `: ([0-9.]+)`).FindStringSubmatch(out)
	if mExp == nil {
		t.Fatalf("no exposure level from systemd-analyze security:\n%s", out)
	}
	install, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if d := regexp.MustCompile("`systemd-analyze security` exposure ([0-9.]+)").FindSubmatch(install); d != nil {
		t.Logf("systemd-analyze security %s in the guest: %s; docs/install.md says %s", unit, mExp[1], d[1])
		if string(d[1]) != mExp[1] {
			t.Errorf("exposure %s on systemd in the guest, docs/install.md says %s", mExp[1], d[1])
		}
	} else {
		t.Logf("systemd-analyze security %s in the guest: %s (docs/install.md states no figure)", unit, mExp[1])
	}

	// --- The etcd target, as docs/install.md adds it: first without the drop-in.
	g.sh("install -d -m 0700 " + etcdData + "/member/snap && echo data > " + etcdData + "/member/snap/db && " +
		"install -d -o diskprobe -g diskprobe -m 0700 " + etcdDir)
	etcdBefore := g.sh("find " + etcdData + " -printf '%p %m %u %s %T@\\n' | sort")
	mainPID := g.mainPID()
	runs := sample(m, `diskprobe_probe_runs_total{probe="fsync",target="varlib"}`)
	g.sh("cat >> " + config + " <<'EOF'\n" + etcdTarget + "EOF")
	g.sh("systemctl reload diskprobe_exporter")
	waitFor(t, "the refused reload in the journal", time.Minute, func() (bool, string) {
		j, _ := g.run(time.Minute, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
		return strings.Contains(j, "reload failed; keeping the running configuration") &&
			strings.Contains(j, "read-only file") && strings.Contains(j, "ReadWritePaths="+etcdDir), j
	})
	if pid := g.mainPID(); pid != mainPID {
		t.Errorf("the refused reload changed the main PID %d → %d", mainPID, pid)
	}
	waitFor(t, "the old configuration still probing", time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && sample(m, `diskprobe_probe_runs_total{probe="fsync",target="varlib"}`) > runs, m
	})
	if m, _ := g.get(metrics); strings.Contains(m, `target="etcd"`) {
		t.Error("the refused configuration's etcd target has series")
	}

	// Then with the drop-in, written without an editor, and a restart.
	g.sh("mkdir -p " + dropIn + " && printf '[Service]\\nReadWritePaths=" + etcdDir + "\\n' > " + dropIn + "/override.conf && " +
		"systemctl daemon-reload && systemctl restart diskprobe_exporter")
	waitActive(t, g)
	waitFor(t, "samples of the etcd target", 2*time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && sample(m, `diskprobe_fdatasync_duration_seconds_count{target="etcd"}`) > 0 &&
			sample(m, `diskprobe_read_duration_seconds_count{target="etcd"}`) > 0, m
	})
	if after := g.sh("find " + etcdData + " -printf '%p %m %u %s %T@\\n' | sort"); after != etcdBefore {
		t.Errorf("etcd's data directory changed:\nbefore\n%s\nafter\n%s", etcdBefore, after)
	}
	t.Logf("probe files: %s", g.sh("ls -la "+etcdDir+"/.diskprobe"))
	phase("etcd target: refused without the drop-in, probed with it")

	// --- A device target, as docs/install.md adds it: refused without the drop-in (the
	// guest's node is root:disk 0660, as udev makes it on a host), probed with the shipped
	// example's drop-in naming that device. That the device cgroup then refuses every other
	// device cannot be shown here: systemd inside nspawn cannot attach device programs to its
	// cgroups (another bound device stayed readable), so only the unit's properties are checked.
	g.sh("chgrp disk " + loop + " && chmod 0660 " + loop)
	g.sh("cat >> " + config + " <<'EOF'\n  - name: loop\n    path: " + loop + "\n    randread: {interval: 1s, ops: 2}\nEOF")
	g.sh("systemctl reload diskprobe_exporter")
	waitFor(t, "the device target failing without the drop-in", time.Minute, func() (bool, string) {
		j, _ := g.run(time.Minute, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
		return strings.Contains(j, "permission denied opening "+loop+" read-only"), j
	})
	g.sh("sed 's|^DeviceAllow=.*|DeviceAllow=" + loop + " r|' /usr/share/doc/diskprobe-exporter/examples/devices.conf > " + dropIn + "/devices.conf && " +
		"systemctl daemon-reload && systemctl restart diskprobe_exporter")
	waitActive(t, g)
	if got := g.show("SupplementaryGroups"); got != "disk" {
		t.Errorf("with devices.conf SupplementaryGroups=%s, want disk", got)
	}
	if got := g.sh("systemctl show -p DeviceAllow " + unit); !strings.Contains(got, "DeviceAllow="+loop+" r\n") || strings.Contains(got, "block-") {
		t.Errorf("with devices.conf the unit allows:\n%s\nwant %s read-only and no other block device", got, loop)
	}
	waitFor(t, "samples of the device target", 2*time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && sample(m, `diskprobe_read_duration_seconds_count{target="loop"}`) > 0, m
	})
	phase("device target: failing without the drop-in, probed with it")

	// --- systemctl reload with no /bin/kill: the exporter reloads, same process.
	mainPID = g.mainPID()
	g.sh("sed -i 's/fsync: {interval: 2s, ops: 2, file_size: 1MiB}/fsync: {interval: 2s, ops: 3, file_size: 1MiB}/' " + config)
	edited := g.sh("cat " + config)
	out = g.sh("journalctl -u " + unit + " --no-pager -o cat | grep -c 'configuration reloaded' || true")
	reloads, _ := strconv.Atoi(strings.TrimSpace(out))
	g.sh("systemctl reload diskprobe_exporter")
	waitFor(t, "systemctl reload applied", time.Minute, func() (bool, string) {
		j, _ := g.run(time.Minute, "sh", "-c", "journalctl -u "+unit+" --no-pager -o cat | grep -c 'configuration reloaded'")
		n, _ := strconv.Atoi(strings.TrimSpace(j))
		return n > reloads, j
	})
	if pid := g.mainPID(); pid != mainPID {
		t.Errorf("reload restarted the exporter: main PID %d → %d", mainPID, pid)
	}
	if st := g.show("ActiveState"); st != "active" {
		t.Errorf("after reload the unit is %s", st)
	}
	t.Log("systemctl reload works on a system without procps (/bin/kill): ExecReload uses the shell's kill")
	phase("reload")

	// --- Upgrade: the locally edited conffile is kept, the service restarted on the new binary.
	mainPID = g.mainPID()
	out = g.sh("dpkg -i /root/new.deb </dev/null")
	t.Logf("dpkg -i %s:\n%s", filepath.Base(deb), out)
	if got := g.sh("cat " + config); got != edited {
		t.Errorf("upgrade did not keep the locally edited %s:\n%s", config, got)
	}
	if left := g.sh("ls " + config + ".dpkg-* 2>/dev/null || true"); strings.TrimSpace(left) != "" {
		t.Errorf("upgrade left %s", left)
	}
	waitActive(t, g)
	if pid := g.mainPID(); pid == mainPID {
		t.Errorf("upgrade did not restart the service (main PID still %d)", pid)
	}
	waitFor(t, "the new version serving", time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && strings.Contains(m, `version="`+version+`"`) && sample(m, `diskprobe_fdatasync_duration_seconds_count{target="etcd"}`) > 0, m
	})
	phase("upgrade " + prevVersion + " → " + version)

	// --- Stop: within TimeoutStopSec, by SIGTERM (systemd did not have to SIGKILL).
	start := time.Now()
	g.sh("systemctl stop diskprobe_exporter")
	stopped := time.Since(start)
	timeout := g.show("TimeoutStopUSec")
	if res := g.show("Result"); res != "success" {
		t.Errorf("systemctl stop: result %q, want success (timeout = SIGKILL after TimeoutStopSec=%s)", res, timeout)
	}
	if j := g.sh("journalctl -u " + unit + " --no-pager -o cat"); strings.Contains(j, "timed out") || strings.Contains(j, "SIGKILL") {
		t.Errorf("the journal says the stop timed out:\n%s", j)
	}
	t.Logf("systemctl stop: %.1fs (TimeoutStopSec=%s)", stopped.Seconds(), timeout)

	// --- Purge with the service running, after the service user (a compromised exporter)
	// planted a symlink where the removal, as root, used to write its list: in the state
	// directory, aimed at a root-owned file. The victim must be byte for byte what it was.
	// (tests/packaging plants more: a symlinked .diskprobe, lists with "..".)
	g.sh("systemctl start diskprobe_exporter")
	waitActive(t, g)
	g.sh("umask 027 && printf 'root:100000:65536\\n' > /etc/victim-list")
	victim := g.sh("stat -c '%a %U %s' /etc/victim-list && cat /etc/victim-list")
	g.sh("setpriv --reuid=diskprobe --regid=diskprobe --clear-groups -- sh -c '" +
		"ln -sf /etc/victim-list /var/lib/diskprobe_exporter/.purge-files'")
	out = g.sh("dpkg --purge " + pkgName)
	if got := g.sh("stat -c '%a %U %s' /etc/victim-list && cat /etc/victim-list"); got != victim {
		t.Errorf("purge changed a root-owned file through the service user's symlink:\nbefore\n%s\nafter\n%s", victim, got)
	}
	g.sh("rm -f /etc/victim-list")
	t.Logf("dpkg --purge:\n%s", out)
	after := g.files()
	var left, ours []string
	for f := range after {
		if !before[f] && !strings.HasPrefix(f, "/root/") {
			left = append(left, f)
		}
	}
	sort.Strings(left)
	for _, f := range left {
		if strings.Contains(f, "diskprobe") {
			ours = append(ours, f)
		}
	}
	t.Logf("after purge, new since before the install:\n%s", strings.Join(left, "\n"))
	for _, f := range ours {
		if f != etcdDir && f != dropIn && !strings.HasPrefix(f, dropIn+"/") {
			t.Errorf("purge left %s", f)
		}
	}
	removal := removalSection(string(install))
	for _, f := range []string{etcdDir, dropIn} {
		if !after[f] {
			t.Errorf("purge removed %s, which the user made", f)
		} else if !strings.Contains(removal, f) {
			t.Errorf("purge leaves %s (the user made it), and docs/install.md's removal section does not say to remove it by hand:\n%s", f, removal)
		}
	}
	if st := g.sh("find /var/lib/systemd /etc/systemd -name '*diskprobe*' ! -path '" + dropIn + "*'"); strings.TrimSpace(st) != "" {
		t.Errorf("purge left systemd state of the package:\n%s", st)
	}
	if after[etcdDir+"/.diskprobe"] {
		t.Errorf("purge left %s/.diskprobe", etcdDir)
	}
	if g.sh("getent passwd diskprobe || true") == "" {
		t.Error("purge removed the diskprobe user; Debian policy keeps system users")
	}
	if got := g.sh("find " + etcdData + " -printf '%p %m %u %s %T@\\n' | sort"); got != etcdBefore {
		t.Errorf("purge changed etcd's data directory:\n%s", got)
	}
	phase("stop, purge")
}

// removalSection is the part of docs/install.md about removing the package: the section
// under a heading that names removal, uninstalling or purge, else the paragraph that says
// `apt purge`.
func removalSection(doc string) string {
	lines := strings.Split(doc, "\n")
	heading := regexp.MustCompile(`(?i)^(#+) .*(remov|uninstall|purg)`)
	for i, l := range lines {
		if m := heading.FindStringSubmatch(l); m != nil {
			end := len(lines)
			for j := i + 1; j < len(lines); j++ {
				if h := regexp.MustCompile(`^(#+) `).FindStringSubmatch(lines[j]); h != nil && len(h[1]) <= len(m[1]) {
					end = j
					break
				}
			}
			return strings.Join(lines[i:end], "\n")
		}
	}
	for _, p := range strings.Split(doc, "\n\n") {
		if strings.Contains(p, "apt purge") {
			return p
		}
	}
	return ""
}

// files lists the guest's files, but for the kernel's, runtime and log directories, and
// package manager state.
func (g *guest) files() map[string]bool {
	g.t.Helper()
	out := g.sh(`find / -xdev \( -path /proc -o -path /sys -o -path /run -o -path /tmp -o -path /var/tmp -o -path /var/log -o -path /var/cache -o -path /var/lib/dpkg -o -path /var/lib/systemd -o -path /dev \) -prune -o -print`)
	files := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(out), "\n") {
		files[f] = true
	}
	return files
}

func (g *guest) show(property string) string {
	g.t.Helper()
	return strings.TrimSpace(g.sh("systemctl show -p " + property + " --value " + unit))
}

func (g *guest) mainPID() int {
	g.t.Helper()
	pid, _ := strconv.Atoi(g.show("MainPID"))
	return pid
}

func waitActive(t *testing.T, g *guest) {
	t.Helper()
	waitFor(t, unit+" active", time.Minute, func() (bool, string) {
		out, _ := g.run(time.Minute, "systemctl", "status", "--no-pager", "-n", "20", unit)
		return g.show("ActiveState") == "active" && g.mainPID() > 0, out
	})
}

// sample returns the value of the series named exactly (name{labels}), or -1.
func sample(body, series string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func onlyFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("%s in %s: %v, want one", pattern, dir, m)
	}
	return m[0]
}

// TestRPMScriptletsOnRealSystemd: no RPM-based root can be made here (no Fedora or RHEL
// mirror is reachable; Debian has no rpm-based bootstrap of its own), so this runs what of
// the .rpm a Debian guest can: its payload unpacked into the guest, and its scriptlets run
// with rpm's arguments, as rpm would run them on a systemd host — %post 1 (user, state
// directory, enabled and started), %postun 1 (the upgrade's restart), %preun 0 then %postun 0
// (stopped, disabled, state and probe files gone). rpm's own database and dependency checks
// are what it does not cover.
func TestRPMScriptletsOnRealSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		need(t, "needs root: boots a Debian system with systemd-nspawn (run make test as root)")
	}
	for _, c := range []string{"systemd-nspawn", "nsenter", "curl", "make", "rpm", "rpm2cpio", "cpio"} {
		if _, err := exec.LookPath(c); err != nil {
			need(t, "%s not found: install the test dependencies with scripts/ensure-deps.sh (make test does)", c)
		}
	}
	cached := framework.ToolDir(t, "debian-root")
	root := testenv.RepoPath()
	dist := t.TempDir()
	run(t, root, "make", "package", "DIST="+dist)
	rpmFile := onlyFile(t, dist, "*.rpm")
	scripts := map[string]string{}
	for _, s := range []struct{ name, tag string }{{"post", "POSTIN"}, {"preun", "PREUN"}, {"postun", "POSTUN"}} {
		body := run(t, root, "rpm", "-qp", "--qf", "%{"+s.tag+"}", rpmFile)
		if !strings.HasPrefix(body, "#!/bin/sh") {
			t.Fatalf("the rpm's %%%s is not the shell script it should be:\n%s", s.name, body)
		}
		scripts[s.name] = body
	}
	files := strings.Fields(run(t, root, "rpm", "-qlp", rpmFile))

	g := boot(t, cached)
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(g.dir, "root", name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The payload, as rpm -i would unpack it (nfpm's names are absolute: keep them inside).
	unpack := exec.Command("sh", "-c", "rpm2cpio \"$1\" | cpio -idmu --no-absolute-filenames --quiet", "sh", rpmFile)
	unpack.Dir = g.dir
	if out, err := unpack.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", rpmFile, err, out)
	}

	// %post 1: a fresh install.
	t.Logf("%%post 1:\n%s", g.sh("/root/post 1"))
	waitActive(t, g)
	if g.show("UnitFileState") != "enabled" {
		t.Errorf("after %%post 1 the unit is %s, want enabled", g.show("UnitFileState"))
	}
	if pw := g.sh("getent passwd diskprobe"); !strings.Contains(pw, ":/var/lib/diskprobe_exporter:") {
		t.Errorf("%%post made the user %q", pw)
	}
	waitFor(t, "samples of the default target (rpm)", 2*time.Minute, func() (bool, string) {
		m, err := g.get(metrics)
		return err == nil && sample(m, `diskprobe_fdatasync_duration_seconds_count{target="varlib"}`) > 0, m
	})

	// %postun 1: the old package's, after an upgrade's %post 2: the service restarts.
	pid := g.mainPID()
	g.sh("/root/post 2 && /root/postun 1")
	waitActive(t, g)
	if g.mainPID() == pid {
		t.Errorf("%%postun 1 (upgrade) did not restart the service (main PID still %d)", pid)
	}

	// Erase: %preun 0, the files go, %postun 0.
	g.sh("/root/preun 0")
	if st := g.show("ActiveState"); st != "inactive" {
		t.Errorf("after %%preun 0 the unit is %s, want inactive", st)
	}
	// Disabled on disk (--no-reload, as %systemd_preun: the manager sees it at %postun's reload).
	if out := g.sh("find /etc/systemd/system -name 'diskprobe_exporter.*'"); strings.TrimSpace(out) != "" {
		t.Errorf("after %%preun 0 the unit is still enabled:\n%s", out)
	}
	var regular []string
	for _, f := range files {
		if st, err := os.Lstat(filepath.Join(g.dir, f)); err == nil && !st.IsDir() {
			regular = append(regular, f)
		}
	}
	g.sh("rm -f " + strings.Join(regular, " "))
	g.sh("/root/postun 0")
	if out := g.sh("ls -d /var/lib/diskprobe_exporter 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("%%postun 0 left /var/lib/diskprobe_exporter")
	}
	if out := g.sh("find /etc/systemd -name '*diskprobe*'"); strings.TrimSpace(out) != "" {
		t.Errorf("erase left systemd links:\n%s", out)
	}
}
