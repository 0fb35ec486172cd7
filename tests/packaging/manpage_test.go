package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestManPageHasTheConfigurationFilesAndSignals: the packaged configuration says
// "Reference: man diskprobe_exporter", so the man page must carry every configuration key
// with its default, the files the package installs, and what the signals do.
func TestManPageHasTheConfigurationFilesAndSignals(t *testing.T) {
	root := testenv.RepoPath()
	out, err := exec.Command("sh", filepath.Join(root, "packaging", "manpage.sh"), testenv.Binary(t), "0.0.0").Output()
	if err != nil {
		t.Fatalf("manpage.sh: %v", err)
	}
	checkManPageSections(t, root, out)
}

// checkManPageSections checks the sections manpage.sh adds to kingpin's page: the rows of
// docs/configuration.md's key table (which docs/configuration_test.go checks against the
// code), the files, and a shutdown promise equal to the documented one.
func checkManPageSections(t *testing.T, root string, page []byte) {
	t.Helper()
	man := string(page)
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^\.SH "([A-Z ]+)"\n`).Split(man, -1)
	names := regexp.MustCompile(`(?m)^\.SH "([A-Z ]+)"\n`).FindAllStringSubmatch(man, -1)
	for i, n := range names {
		sections[n[1]] = parts[i+1]
	}
	for _, s := range []string{"NAME", "SYNOPSIS", "OPTIONS", "CONFIGURATION", "FILES", "SIGNALS"} {
		if _, ok := sections[s]; !ok {
			t.Errorf("man page has no %s section", s)
		}
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "### Every key and its default")
	table, _, _ = strings.Cut(table, "\n#")
	rows := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| ([^|]+?) \\|").FindAllStringSubmatch(table, -1)
	if len(rows) < 10 {
		t.Fatalf("docs/configuration.md: %d rows in the key table", len(rows))
	}
	for _, r := range rows {
		want := `\fB` + r[1] + `\fR (default: ` + strings.ReplaceAll(r[2], "`", "") + ")"
		if !strings.Contains(sections["CONFIGURATION"], want) {
			t.Errorf("man page CONFIGURATION lacks %q", want)
		}
	}

	// What nfpm is given: packaging/nfpm.yaml with the documentation packaging/nfpm-config.sh adds.
	for _, format := range []string{"deb", "rpm"} {
		nfpm, err := exec.Command("sh", filepath.Join(root, "packaging", "nfpm-config.sh"), format, "dist/.stage").Output()
		if err != nil {
			t.Fatalf("packaging/nfpm-config.sh %s: %v", format, err)
		}
		for _, f := range []string{"/etc/diskprobe_exporter/diskprobe.yml", "/etc/default/diskprobe_exporter", "/usr/share/diskprobe_exporter", "/usr/share/doc/diskprobe-exporter/"} {
			if !strings.Contains(string(nfpm), "dst: "+f) {
				t.Errorf("man page FILES names %s, which the %s package (packaging/nfpm-config.sh %s) does not install", f, format, format)
			}
		}
	}
	for _, f := range []string{"/etc/diskprobe_exporter/diskprobe.yml", "/etc/default/diskprobe_exporter", "/usr/share/diskprobe_exporter/alerts/", "/usr/share/diskprobe_exporter/dashboards/", "/usr/share/doc/diskprobe-exporter/"} {
		if !strings.Contains(sections["FILES"], `\fB`+f+`\fR`) {
			t.Errorf("man page FILES lacks %s", f)
		}
	}
	guides, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, g := range guides {
		if !strings.Contains(sections["FILES"], filepath.Base(g)) {
			t.Errorf("man page FILES does not name %s, which the package ships in /usr/share/doc/diskprobe-exporter/", filepath.Base(g))
		}
	}

	promise := regexp.MustCompile(`exit within (\d+) s`)
	documented := promise.FindSubmatch(doc)
	stated := promise.FindStringSubmatch(sections["SIGNALS"])
	if documented == nil || stated == nil || stated[1] != string(documented[1]) {
		t.Errorf("man page SIGNALS promises %v, docs/configuration.md %q: they must agree", stated, documented)
	}
	if !strings.Contains(sections["SIGNALS"], `\fBSIGHUP\fR`) {
		t.Error("man page SIGNALS does not say what SIGHUP does")
	}
}
