package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

const nobodyUID = 65534

// TestForeignFilesAreNeverTouched puts what an exporter must never write at the paths of
// its probe files: somebody else's file, symlinks to files it must not write, a symlinked
// probe directory and one owned by another user. Each is left byte for byte as it was,
// with a clear error in the log and counted. Beside them, a target left to the exporter
// gets a 0700 .diskprobe with 0600 files, also when a 0755 one of ours was there.
func TestForeignFilesAreNeverTouched(t *testing.T) {
	testenv.RequireRoot(t)
	d := mkdirs(t, "ours", "foreign", "symlink", "dirlink", "dirowner", "elsewhere", "victims")

	// ours: a .diskprobe of ours left too open by an earlier version.
	must(t, os.Mkdir(filepath.Join(d["ours"], ".diskprobe"), 0o755))
	// foreign: somebody's file at the fsync probe's path.
	must(t, os.Mkdir(filepath.Join(d["foreign"], ".diskprobe"), 0o700))
	foreignFile := filepath.Join(d["foreign"], ".diskprobe", "fsync.probe")
	writeRandom(t, foreignFile, 1<<20)
	// symlink: both probe files are symlinks to files that must not be written.
	must(t, os.Mkdir(filepath.Join(d["symlink"], ".diskprobe"), 0o700))
	victim := filepath.Join(d["victims"], "etcd-wal.db")
	victim2 := filepath.Join(d["victims"], "database.ibd")
	writeRandom(t, victim, 1<<20)
	writeRandom(t, victim2, 4<<20)
	must(t, os.Symlink(victim, filepath.Join(d["symlink"], ".diskprobe", "fsync.probe")))
	must(t, os.Symlink(victim2, filepath.Join(d["symlink"], ".diskprobe", "read.probe")))
	// dirlink: .diskprobe is a symlink to another directory.
	must(t, os.Symlink(d["elsewhere"], filepath.Join(d["dirlink"], ".diskprobe")))
	// dirowner: .diskprobe belongs to another user.
	must(t, os.Mkdir(filepath.Join(d["dirowner"], ".diskprobe"), 0o700))
	must(t, os.Chown(filepath.Join(d["dirowner"], ".diskprobe"), nobodyUID, nobodyUID))

	sums := map[string][32]byte{}
	for _, p := range []string{foreignFile, victim, victim2} {
		sums[p] = sha256File(t, p)
	}

	var cfg string
	cfg += "targets:\n"
	for _, name := range []string{"ours", "foreign", "symlink", "dirlink", "dirowner"} {
		cfg += fmt.Sprintf(`  - name: %s
    path: %s
    fsync: {interval: 1s, ops: 2, block_size: 4KiB, file_size: 1MiB}
    randread: {interval: 1s, ops: 2, file_size: 4MiB}
    limits: {timeout: 10s, min_free: 0}
`, name, d[name])
	}
	// /-/ready says 503 once a round has refused what was planted (checked below):
	// /metrics is what is up.
	e := framework.StartExporterWith(t, framework.WriteConfig(t, cfg), framework.ExporterOptions{Ready: metricsAnswer})
	f := framework.WaitMetric(t, e, 20*time.Second, "rounds on every target", func(f families) bool {
		if runs(f, "ours", "fsync") < 2 || runs(f, "ours", "randread") < 2 {
			return false
		}
		for _, name := range []string{"foreign", "symlink", "dirlink", "dirowner"} {
			if errs(f, name, "fsync") < 2 {
				return false
			}
		}
		return errs(f, "symlink", "randread") >= 2 && errs(f, "dirlink", "randread") >= 2 && errs(f, "dirowner", "randread") >= 2
	})
	alive(t, e)

	for p, sum := range sums {
		if sha256File(t, p) != sum {
			t.Errorf("%s was modified", p)
		}
	}
	if entries, _ := os.ReadDir(d["elsewhere"]); len(entries) != 0 {
		t.Errorf("the exporter wrote through a symlinked .diskprobe: %d entries in its target", len(entries))
	}
	if entries, _ := os.ReadDir(filepath.Join(d["dirowner"], ".diskprobe")); len(entries) != 0 {
		t.Errorf("the exporter wrote into a .diskprobe owned by another user: %d entries", len(entries))
	}

	for _, c := range []struct{ target, probe, want string }{
		{"foreign", "fsync", "it has no diskprobe_exporter header"},
		{"symlink", "fsync", "it is a symlink"},
		{"symlink", "randread", "it is a symlink"},
		{"dirlink", "fsync", ".diskprobe: it is a symlink"},
		{"dirowner", "fsync", "it is owned by uid 65534"},
	} {
		lines := logLines(e, "target="+c.target, "refusing to touch", c.want)
		if len(lines) == 0 {
			t.Errorf("%s/%s: no log line saying %q", c.target, c.probe, c.want)
			continue
		}
		if n := errorLines(e, c.target, c.probe); n != 1 {
			t.Errorf("%s/%s: %d error lines over %.0f failed rounds; want one", c.target, c.probe, n, errs(f, c.target, c.probe))
		}
	}
	t.Logf("e.g. %s", logLines(e, "target=symlink", "refusing to touch")[0])
	if code, body := readyStatus(t, e); code != http.StatusServiceUnavailable || !strings.Contains(body, "refuses to probe") || !strings.Contains(body, "refusing to touch") {
		t.Errorf("/-/ready while targets refuse what was planted: %d %q, want 503 naming one", code, body)
	}

	// Moved away by the operator: the probe recovers by itself.
	must(t, os.Rename(foreignFile, filepath.Join(d["victims"], "moved-away")))
	moved := time.Now()
	framework.WaitMetric(t, e, 15*time.Second, "an fsync round once the foreign file is gone", func(f families) bool {
		return lastSuccess(f, "foreign", "fsync") > float64(moved.UnixNano())/1e9
	})
	if len(logLines(e, "probe recovered", "target=foreign", "probe=fsync")) != 1 {
		t.Errorf("no log line saying the probe recovered once the foreign file was moved away")
	}

	// The exporter's own files: 0700 directory, 0600 files, owned by its user.
	checkMode(t, filepath.Join(d["ours"], ".diskprobe"), 0o700)
	checkMode(t, filepath.Join(d["ours"], ".diskprobe", "fsync.probe"), 0o600)
	checkMode(t, filepath.Join(d["ours"], ".diskprobe", "read.probe"), 0o600)
	if errs(f, "ours", "fsync")+errs(f, "ours", "randread") != 0 {
		t.Errorf("errors on the target beside the hostile ones")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeRandom(t *testing.T, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	must(t, os.WriteFile(path, b, 0o644))
}

func sha256File(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if got := os.FileMode(st.Mode & 0o7777); got != want || int(st.Uid) != os.Geteuid() {
		t.Errorf("%s: mode %04o uid %d; want %04o owned by the exporter's uid %d", path, got, st.Uid, want, os.Geteuid())
	}
}
