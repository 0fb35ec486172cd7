package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestPackagesPassLintianAndRpmlint builds both packages and runs the distributions' own
// linters on them: lintian on the .deb must report no error and no warning that the
// package's overrides (packaging/lintian-overrides, each with its reason) do not cover;
// rpmlint on the .rpm, with packaging/rpmlint.toml (the rpm world's overrides, each with its
// reason), nothing but the missing signature. Both outputs are printed.
func TestPackagesPassLintianAndRpmlint(t *testing.T) {
	needCommands(t, "make", "lintian", "rpmlint", "rpm", "dpkg-deb", "cpio")
	root := testenv.RepoPath()
	start := time.Now().Add(-time.Second)
	dist := t.TempDir()
	run(t, root, 10*time.Minute, "make", "package", "DIST="+dist)
	deb := newestPackage(t, dist, ".deb", start)
	rpmFile := newestPackage(t, dist, ".rpm", start)

	// lintian: E: error, W: warning, O: overridden (printed with its reason's tag).
	out, err := runErr(dist, 5*time.Minute, nil, "lintian", "--tag-display-limit", "0", "--show-overrides", deb)
	t.Logf("lintian --show-overrides %s (exit %v):\n%s", filepath.Base(deb), err, out)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "W: ") {
			t.Errorf("lintian: %s", l)
		}
	}
	// --show-overrides makes lintian exit 2; that it ran its checks shows in the overridden
	// tags it printed.
	if !strings.Contains(out, "O: "+pkgName+": statically-linked-binary") {
		t.Errorf("lintian ran no checks (%v)", err)
	}
	overrides, err := os.ReadFile(filepath.Join(root, "packaging", "lintian-overrides"))
	if err != nil {
		t.Fatal(err)
	}
	checkOverridesHaveReasons(t, string(overrides))

	// rpmlint unpacks the payload with `rpm2cpio | cpio -id`; nfpm's payload names are
	// absolute, which GNU cpio would write into / as root. A cpio that keeps them under
	// rpmlint's own directory.
	wrap := t.TempDir()
	if err := os.WriteFile(filepath.Join(wrap, "cpio"), []byte("#!/bin/sh\nexec "+lookPath(t, "cpio")+" --no-absolute-filenames \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + wrap + ":" + os.Getenv("PATH"), "TMPDIR=" + t.TempDir()}
	out, err = runErr(dist, 5*time.Minute, env, "rpmlint", "-c", filepath.Join(root, "packaging", "rpmlint.toml"), rpmFile)
	t.Logf("rpmlint -c packaging/rpmlint.toml %s (exit %v):\n%s", filepath.Base(rpmFile), err, out)
	finding := regexp.MustCompile(`^\S+: ([EW]): (\S+)`)
	findings := 0
	for _, l := range strings.Split(out, "\n") {
		m := finding.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		findings++
		if m[2] != "no-signature" {
			t.Errorf("rpmlint: %s", l)
		}
	}
	if findings == 0 && !strings.Contains(out, "packages and 0 specfiles checked") {
		t.Errorf("rpmlint checked nothing:\n%s", out)
	}

	// The changelogs both come from CHANGELOG.md and name this version.
	version := strings.TrimSpace(run(t, root, time.Minute, "dpkg-deb", "-f", deb, "Version"))
	clog := run(t, root, time.Minute, "rpm", "-qp", "--changelog", rpmFile)
	if !strings.Contains(clog, "- "+version+"\n") {
		t.Errorf("the rpm's %%changelog does not name %s:\n%s", version, clog)
	}
	// Documentation is %doc in the rpm.
	flags := run(t, root, time.Minute, "rpm", "-qp", "--qf", `[%{FILEFLAGS:fflags} %{FILENAMES}\n]`, rpmFile)
	for _, l := range strings.Split(strings.TrimSpace(flags), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && strings.HasPrefix(f[1], "/usr/share/doc/diskprobe-exporter/") && !strings.Contains(f[0], "d") {
			t.Errorf("rpm: %s is not marked as documentation (flags %q)", f[1], f[0])
		}
	}
}

// checkOverridesHaveReasons: every override line follows a comment line, its reason.
func checkOverridesHaveReasons(t *testing.T, overrides string) {
	t.Helper()
	prevComment := false
	for _, l := range strings.Split(overrides, "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			prevComment = true
		case strings.TrimSpace(l) == "":
			prevComment = false
		default:
			if !prevComment {
				t.Errorf("packaging/lintian-overrides: %q has no reason (a comment line above it)", l)
			}
			prevComment = false
		}
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMaintainerScriptsPurgeAlike: the deb's prerm and postrm and the rpm's %preun and
// %postun list and delete the same files on purge and erase, from blocks of shell kept
// identical in both.
func TestMaintainerScriptsPurgeAlike(t *testing.T) {
	root := testenv.RepoPath()
	block := func(path, name string) string {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i, j := strings.Index(s, "# BEGIN "+name), strings.Index(s, "# END "+name)
		if i < 0 || j < i {
			t.Fatalf("%s has no # BEGIN %s ... # END %s block", path, name, name)
		}
		s = s[i:j]
		return s[strings.Index(s, "\n")+1:]
	}
	deb, rpm := block("packaging/scripts/deb/postrm", "purge"), block("packaging/scripts/rpm/postun", "purge")
	if deb != rpm {
		t.Errorf("the purge blocks of packaging/scripts/deb/postrm and packaging/scripts/rpm/postun differ:\n--- deb\n%s\n--- rpm\n%s", deb, rpm)
	}
	if !strings.Contains(deb, `rm -rf -- "$list" "$state"`) {
		t.Error("the purge block no longer removes the state directory and the list")
	}
	debList, rpmList := block("packaging/scripts/deb/prerm", "list"), block("packaging/scripts/rpm/preun", "list")
	if debList != rpmList {
		t.Errorf("the list blocks of packaging/scripts/deb/prerm and packaging/scripts/rpm/preun differ:\n--- deb\n%s\n--- rpm\n%s", debList, rpmList)
	}
}
