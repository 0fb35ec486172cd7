package cluster

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCheckJobMeasuresEveryControlPlaneNodeOrOnlyOne runs examples/kubernetes/check-job.yaml
// with the commands of its comment, as written (the image set to the one imported, as a user
// sets their registry's): one `kubectl apply` must check every control-plane node, each in a
// pod of its own on a different node, the wait must end, the table must give each node's
// verdict, the logs each node's report, and etcd's directories must be as they were.
func TestCheckJobMeasuresEveryControlPlaneNodeOrOnlyOne(t *testing.T) {
	e := setup(t)
	members := etcdMembers(t, e)
	for _, n := range e.c.Nodes {
		removeAfter(t, n.Path(etcdProbeDir))
	}
	sh := e.shell(t)
	job, cmds := sh.exampleJob(t, "check-job.yaml")
	if n := int(*job.Spec.Completions); n != len(e.c.Nodes) {
		t.Fatalf("check-job.yaml has %d completions, the cluster %d control-plane nodes", n, len(e.c.Nodes))
	}
	ns := ""
	for _, c := range cmds {
		if m := regexp.MustCompile(`-n (\S+)`).FindStringSubmatch(c); m != nil {
			ns = m[1]
		}
	}
	e.namespace(t, ns, "privileged")
	start := time.Now()
	var table, logs string
	for _, c := range cmds {
		out := sh.run(t, c)
		switch {
		case strings.Contains(c, " wait "):
			t.Logf("%s: %v", c, time.Since(start).Round(100*time.Millisecond))
		case strings.Contains(c, "custom-columns"):
			table = out
		case strings.Contains(c, " logs "):
			logs = out
		}
	}
	t.Logf("verdicts:\n%s\nreports:\n%s", table, logs)
	rows := strings.Split(strings.TrimSpace(table), "\n")
	if len(rows) != len(e.c.Nodes)+1 {
		t.Fatalf("the verdict table has %d rows, want a header and one per node", len(rows))
	}
	nodes := map[string]bool{}
	for _, row := range rows[1:] {
		f := strings.Fields(row)
		if len(f) != 2 || (f[1] != "0" && f[1] != "1") {
			t.Errorf("verdict row %q: want a node and exit code 0 (PASS) or 1 (FAIL)", row)
			continue
		}
		nodes[f[0]] = true
	}
	for _, n := range e.c.Nodes {
		if !nodes[n.Name] {
			t.Errorf("no check ran on %s", n.Name)
		}
	}
	// etcd's two numbers, each its own verdict line: the WAL's fdatasync and the backend's commit.
	for _, job := range []string{"fdatasync", "commit"} {
		if v := regexp.MustCompile(`(?m)\] (PASS|FAIL)  `+job+` p99 `).FindAllString(logs, -1); len(v) != len(e.c.Nodes) {
			t.Errorf("the reports hold %d %s verdicts, want one per node", len(v), job)
		}
	}
	for _, n := range e.c.Nodes {
		if after := tree(t, n.Path(etcdDir)); after != members[n.Name] {
			t.Errorf("%s: %s changed:\nbefore:\n%s\nafter:\n%s", n.Name, etcdDir, members[n.Name], after)
		}
	}
}
