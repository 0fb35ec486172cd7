package benchkit

import (
	"strings"
	"testing"
	"time"
)

func TestEtcdSectionIsSplicedBetweenItsMarkersOnly(t *testing.T) {
	d := &EtcdDisk{Name: "disk", Window: time.Minute, PutRate: 100, EtcdP99: 0.002, OurP99: 0.0021, EtcdVerdictOK: true, OurVerdictOK: true,
		EtcdShares: make([]float64, len(EtcdEdges)), OurShares: make([]float64, len(EtcdEdges)), CheckVerdict: "PASS x", CheckPerfResult: "PASS: y"}
	rep := &Report{Date: time.Now(), Etcd: []*EtcdDisk{d}}
	doc := "before\n" + etcdBegin + "\nold figures\n" + etcdEnd + "\nafter\n"
	got, err := rep.SpliceEtcd(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "before\n"+etcdBegin) || !strings.HasSuffix(got, etcdEnd+"\nafter\n") || strings.Contains(got, "old figures") ||
		!strings.Contains(got, "## Against a live etcd") || strings.Count(got, etcdBegin) != 1 {
		t.Errorf("spliced report:\n%s", got)
	}
	if !strings.Contains(got, "| met |") && !strings.Contains(got, "met |") {
		t.Errorf("the section has no goals table:\n%s", got)
	}
	if _, err := rep.SpliceEtcd("no markers"); err == nil {
		t.Error("a report without the markers was accepted")
	}
}

func TestCommitSectionIsAddedAfterTheEtcdOneThenReplaced(t *testing.T) {
	d := &EtcdCommitDisk{Name: "disk", Window: time.Minute, PutRate: 100, EtcdP99: 0.004, OurP99: 0.0045, EtcdVerdictOK: true, OurVerdictOK: true,
		EtcdShares: make([]float64, len(EtcdEdges)), OurShares: make([]float64, len(EtcdEdges)), CheckVerdict: "PASS x"}
	c := &Commit{Date: time.Now(), Disks: []*EtcdCommitDisk{d}, Cost: &CommitCost{Rounds: 10, Interval: 15 * time.Second, Busy: 100 * time.Millisecond}}
	doc := "before\n" + etcdBegin + "\netcd figures\n" + etcdEnd + "\nafter\n"
	added, err := c.SpliceCommit(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(added, "before\n"+etcdBegin+"\netcd figures\n"+etcdEnd+"\n\n"+commitBegin) || !strings.HasSuffix(added, commitEnd+"\nafter\n") {
		t.Errorf("commit section not added after the etcd one:\n%s", added)
	}
	d.OurP99 = 0.1
	replaced, err := c.SpliceCommit(added)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(replaced, commitBegin) != 1 || !strings.Contains(replaced, "100.0 ms vs etcd") || strings.Contains(replaced, "4.5 ms vs etcd") {
		t.Errorf("commit section not replaced:\n%s", replaced)
	}
	if _, err := c.SpliceCommit("no markers"); err == nil {
		t.Error("a report without the etcd section was accepted")
	}
}

func TestRegeneratedReportKeepsOtherTestsSections(t *testing.T) {
	old := "# Benchmarks\nold figures\n" + etcdBegin + "\nold etcd\n" + etcdEnd + "\n\n" +
		RuleScaleBegin + "\nrule cost 7.5\n" + RuleScaleEnd + "\n\n" + LiveAlertBegin + "\nfired minute 3\n" + LiveAlertEnd + "\n"
	regenerated := "# Benchmarks\nnew figures\n" + etcdBegin + "\nnew etcd\n" + etcdEnd + "\n"
	got := KeepSections(old, regenerated)
	for _, want := range []string{"new figures", "new etcd", RuleScaleBegin + "\nrule cost 7.5\n" + RuleScaleEnd, LiveAlertBegin + "\nfired minute 3\n" + LiveAlertEnd} {
		if !strings.Contains(got, want) {
			t.Errorf("regenerated report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old etcd") || strings.Count(got, RuleScaleBegin) != 1 {
		t.Errorf("regenerated report:\n%s", got)
	}
	if again := KeepSections(got, regenerated); again != got {
		t.Errorf("not stable:\n%s\n---\n%s", got, again)
	}
}
