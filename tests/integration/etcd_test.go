package integration

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// etcdWarning is what etcd logs at start for an entry of its data directory it does not know.
const etcdWarning = "invalid file/dir"

// TestEtcdSeesNothingOfAnExporterProbingBesideItsDataDir runs Debian's etcd with its data
// directory at the measured path while the exporter probes its disk from a probe_dir
// beside it, restarts etcd (it looks over its data directory at every start) and requires
// a clean etcd log and an unchanged data directory. The same run with the probe files
// inside the data directory (no probe_dir) must show etcd's warning: the check can fail.
func TestEtcdSeesNothingOfAnExporterProbingBesideItsDataDir(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "etcd")
	for _, c := range []struct {
		name     string
		beside   bool
		wantWarn bool
	}{
		{"probe_dir beside the data dir", true, false},
		{"probe files inside the data dir (control)", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, fs := testenv.LoopExt4(t, 512*mib)
			data := filepath.Join(fs, "etcd")
			etcd := framework.StartEtcd(t, data)
			etcdPut(t, etcd, "before", "1")
			etcd.Stop()
			before := listing(t, data, false) // etcd's own writes change sizes and times

			target := fmt.Sprintf("  - name: etcd\n    path: %s\n", data)
			if c.beside {
				beside := filepath.Join(fs, "diskprobe-etcd")
				if err := os.Mkdir(beside, 0o700); err != nil {
					t.Fatal(err)
				}
				target += "    probe_dir: " + beside + "\n"
			}
			e := framework.StartExporter(t, framework.WriteConfig(t, "targets:\n"+target+
				"    fsync:    {interval: 1s, ops: 5, file_size: 1MiB}\n    randread: {interval: 1s, ops: 5, file_size: 1MiB}\n    limits:   {min_free: 1MiB}\n"))
			framework.WaitMetric(t, e, 30*time.Second, "fdatasync and read samples", func(f families) bool {
				return metric(f, "diskprobe_fdatasync_duration_seconds", "target", "etcd") >= 10 &&
					metric(f, "diskprobe_read_duration_seconds", "target", "etcd") >= 10
			})

			// etcd starts again on its data directory while the exporter probes.
			etcd = framework.StartEtcd(t, data)
			etcdPut(t, etcd, "after", "2")
			etcd.Stop()
			stopExporter(t, e)

			warned := strings.Contains(etcd.Log.String(), etcdWarning)
			if warned != c.wantWarn {
				t.Errorf("etcd logged %q: %v, want %v; etcd log:\n%s", etcdWarning, warned, c.wantWarn, etcd.Log.String())
			}
			after := listing(t, data, false)
			if changed := after != before; changed != c.wantWarn {
				t.Errorf("etcd's data directory changed: %v, want %v\nbefore:\n%s\nafter:\n%s", changed, c.wantWarn, before, after)
			}
		})
	}
}

// etcdPut writes a key through etcd 3.4's JSON gateway.
func etcdPut(t *testing.T, e *framework.Etcd, key, value string) {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, b64(key), b64(value))
	resp, err := http.Post(e.ClientURL+"/v3/kv/put", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd put: %s", resp.Status)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
