package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestRemovalAndPurgeIgnoreWhatTheServiceUserPlanted: the diskprobe user owns the state
// directory and every .diskprobe/, so whatever it leaves there is an attacker's (a
// compromised exporter's). dpkg --remove and --purge run the maintainer scripts as root;
// they must not write through its symlinks, nor delete from a list it wrote or fed. Planted
// here before the removal and before the purge, as that user:
//
//   - $state/.purge-files, the list's old place, a symlink to a root-owned 0640 file (the
//     shell's `>` as root followed it: the victim truncated and filled with paths);
//   - after the removal, $state/.purge-files a list of its own making, naming a file outside
//     any .diskprobe through `..` and a root-owned file with the exporter's header through a
//     symlinked .diskprobe;
//   - the same lines added to the list the removal made (as if the binary had printed them).
//
// The victims must be byte for byte what they were, and the exporter's own probe files must
// still go. The .deb is installed in a chroot of the tests' cached Debian root (no systemd
// runs there: tests/systemd covers the stop), so the machine's own dpkg database is not
// touched.
func TestRemovalAndPurgeIgnoreWhatTheServiceUserPlanted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: installs the .deb in a chroot and runs its maintainer scripts")
	}
	needCommands(t, "make", "unshare", "chroot", "cp")
	cached := framework.ToolDir(t, "debian-root")
	root := testenv.RepoPath()
	start := time.Now()
	dist := t.TempDir()
	run(t, root, 10*time.Minute, "make", "package", "DIST="+dist)
	deb := newestPackage(t, dist, ".deb", start.Add(-time.Second))
	t.Logf("make package: %.1fs", time.Since(start).Seconds())

	chroot := filepath.Join(t.TempDir(), "root")
	run(t, "/", 5*time.Minute, "cp", "-a", "--reflink=auto", cached, chroot)
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chroot, "root", "new.deb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// sh runs a script in the chroot, with its own /proc in a mount namespace of its own.
	sh := func(script string) string {
		t.Helper()
		out, err := runErr("/", 5*time.Minute, nil, "unshare", "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(chroot, "proc"),
			"chroot", chroot, "/bin/sh", "-ec", script)
		if err != nil {
			t.Fatalf("in the chroot: %s: %v\n%s", script, err, out)
		}
		return out
	}
	const asUser = "setpriv --reuid=diskprobe --regid=diskprobe --clear-groups -- "

	t.Logf("dpkg -i:\n%s", sh("dpkg -i /root/new.deb </dev/null"))
	// Victims: files only root may write, one of them carrying the exporter's header, and a
	// file in a directory the user owns but outside any .diskprobe.
	sh(`umask 027
printf 'root:100000:65536\n' > /etc/victim-list
install -d -m 0755 /etc/victim-dir
printf 'diskprobe_exporter probe file v1\nroot data\n' > /etc/victim-dir/fsync.probe
install -d -o diskprobe -g diskprobe -m 0755 /srv/t /srv/t/.diskprobe
printf 'diskprobe_exporter probe file v1\nkeep\n' > /srv/t/keep.probe
chown diskprobe:diskprobe /srv/t/keep.probe
` + asUser + `sh -c 'printf "diskprobe_exporter probe file v1\n" > /srv/t/.diskprobe/fsync.probe'
install -d -m 0755 /srv/r && install -d -o diskprobe -g diskprobe -m 0755 /srv/r/.diskprobe
` + asUser + `sh -c 'printf "diskprobe_exporter probe file v1\n" > /srv/r/.diskprobe/fsync.probe'
printf '  - name: t\n    path: /srv/t\n  - name: r\n    path: /srv/r\n' >> /etc/diskprobe_exporter/diskprobe.yml`)
	victims := []string{"/etc/victim-list", "/etc/victim-dir/fsync.probe", "/srv/t/keep.probe"}
	snapshot := func() string {
		return sh("for f in " + strings.Join(victims, " ") + "; do [ -e \"$f\" ] || { echo \"$f: gone\"; continue; }; stat -c '%n %a %U:%G %s' \"$f\"; base64 -w0 \"$f\"; echo; done")
	}
	before := snapshot()

	// Before the removal: the list's old place aimed at a root-owned file, and .diskprobe of
	// the state directory a symlink to a root-owned directory.
	sh(asUser + `sh -c 'ln -s /etc/victim-list /var/lib/diskprobe_exporter/.purge-files &&
rm -rf /var/lib/diskprobe_exporter/.diskprobe && ln -s /etc/victim-dir /var/lib/diskprobe_exporter/.diskprobe'`)
	t.Logf("dpkg --remove:\n%s", sh("dpkg --remove diskprobe-exporter </dev/null"))
	if got := snapshot(); got != before {
		t.Errorf("dpkg --remove changed a root-owned file through the service user's symlink:\nbefore\n%s\nafter\n%s", before, got)
	}

	if got := sh("stat -c '%a %U:%G %F' /var/lib/diskprobe_exporter.purge 2>&1 || true"); got != "700 root:root directory\n" {
		t.Errorf("the removal's list is in %q, want a directory only root may enter (0700 root:root)", got)
	}
	hostile := `/srv/t/.diskprobe/../keep.probe
/srv/t/keep.probe
/srv/t/.diskprobe/./../keep.probe
/var/lib/diskprobe_exporter/.diskprobe/fsync.probe
/var/lib/diskprobe_exporter/.diskprobe/../../../etc/victim-dir/fsync.probe
/var/lib/diskprobe_exporter/.diskprobe
`
	// Between removal and purge: a list of the user's own making where the old postrm read
	// it, and the same lines in the list the removal made, as if the binary had printed them.
	t.Logf("the list:\n%s", sh(asUser+`sh -c 'rm -f /var/lib/diskprobe_exporter/.purge-files && cat > /var/lib/diskprobe_exporter/.purge-files' <<'EOF'
`+hostile+`EOF
if [ -d /var/lib/diskprobe_exporter.purge ]; then
	stat -c '%n %a %U' /var/lib/diskprobe_exporter.purge /var/lib/diskprobe_exporter.purge/files
	cat /var/lib/diskprobe_exporter.purge/files
	cat >> /var/lib/diskprobe_exporter.purge/files <<'EOF'
`+hostile+`EOF
fi`))
	purge := sh("dpkg --purge diskprobe-exporter </dev/null")
	t.Logf("dpkg --purge:\n%s", purge)
	// A .diskprobe the user owns in a directory only root may write: its files go, the
	// directory stays (the user cannot remove it), and purge says why.
	if want := "diskprobe-exporter: left /srv/r/.diskprobe: Permission denied"; !strings.Contains(purge, want) {
		t.Errorf("purge does not say %q", want)
	}
	if got := sh("ls -A /srv/r/.diskprobe"); got != "" {
		t.Errorf("purge left %q in /srv/r/.diskprobe, the exporter's own files", got)
	}
	if got := snapshot(); got != before {
		t.Errorf("dpkg --purge changed or deleted a file the exporter did not create:\nbefore\n%s\nafter\n%s", before, got)
	}
	for _, p := range []string{"/srv/t/.diskprobe", "/var/lib/diskprobe_exporter", "/var/lib/diskprobe_exporter.purge"} {
		if _, err := os.Lstat(filepath.Join(chroot, p)); err == nil {
			t.Errorf("after purge %s is still there", p)
		}
	}
	if t.Failed() {
		t.Logf("the chroot's /srv/t:\n%s", sh("ls -laR /srv/t"))
	}
}
