package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTheVantageFindingNamesWhatIsSlow(t *testing.T) {
	for _, c := range []struct {
		in, out   Verdict
		throttles []string
		want      string
	}{
		{Fail, Pass, []string{"write_iops_device 7:3 100"}, "the disk is fast, etcd's cgroup is throttled"},
		{Fail, Fail, []string{"write_iops_device 7:3 100"}, "the disk is slow for everyone"},
		{Fail, Pass, nil, "etcd waits on I/O behind a neighbour in a higher class"},
		{Pass, Pass, nil, "the disk is fast, from etcd's cgroup as from outside"},
		{Pass, Fail, nil, "the disk is slow only from outside: etcd's cgroup and class are not what holds it back"},
	} {
		v := &VantageReport{Inside: &Report{Verdict: c.in}, Outside: &Report{Verdict: c.out}, Process: "etcd", Throttles: c.throttles}
		if got := v.finding(); got != c.want {
			t.Errorf("inside %s, outside %s, limits %v: %q, want %q", c.in, c.out, c.throttles, got, c.want)
		}
	}
}

func TestTheVantageReportSaysWhichRunIsWhich(t *testing.T) {
	v := &VantageReport{Inside: &Report{Path: "/d", Verdict: Fail}, Outside: &Report{Path: "/d", Verdict: Pass}, Process: "etcd"}
	v.Finding = v.finding()
	var text, js bytes.Buffer
	if err := v.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== outside: from the exporter's own cgroup and I/O class", "== inside: from PID 0 (etcd)", "limits on the cgroup: none", "inside FAIL, outside PASS: etcd waits on I/O"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if err := v.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out["finding"] != v.Finding || out["exit_code"] != 1.0 || out["inside"].(map[string]any)["verdict"] != "FAIL" {
		t.Errorf("%s", js.String())
	}
	if v.ExitCode() != 1 {
		t.Error("a FAIL inside must exit 1")
	}
}
