package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// A configuration refused at start is reported through the logger, one record per error at
// level error, each naming file, line and field: with --log.format=json every line stays
// JSON, and the journal has the level. The errors were printed on stderr as bare lines,
// outside the log.
func TestConfigErrorsAtStartAreLogRecordsNamingFileLineAndField(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "diskprobe.yml")
	body := "targets:\n  - name: a\n    path: " + dir + "\n    fsyncc: {}\n  - name: b\n    path: " + dir + "/nope\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	format := promslog.NewFormat()
	if err := format.Set("json"); err != nil {
		t.Fatal(err)
	}
	logger := promslog.New(&promslog.Config{Format: format, Writer: &log})
	if code := run(file, device.Paths{ProcFS: "/proc", SysFS: "/sys"}, testHTTPOptions, testListen(), logger); code != 1 {
		t.Fatalf("run exited %d on a bad configuration, want 1", code)
	}
	want := []string{
		`diskprobe.yml:4: targets[0]: unknown field "fsyncc"`,
		"diskprobe.yml:6: targets[1].path: " + dir + "/nope does not exist",
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec struct{ Level, Msg, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line of the log is not JSON: %q", line)
		}
		if rec.Level == "ERROR" {
			got = append(got, rec.Err)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("error records:\n%s\nwant one per error:\n%s\nlog:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), log.String())
	}
}

// testHTTPOptions are the HTTP flags' defaults.
var testHTTPOptions = httpOptions{metricsPath: "/metrics", maxConnections: defaultMaxConnections}

// testListen is the toolkit's flags for a free loopback port and no web configuration.
func testListen() *web.FlagConfig {
	addrs, noSocket, noWebConfig := []string{"127.0.0.1:0"}, false, ""
	return &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &noSocket, WebConfigFile: &noWebConfig}
}
