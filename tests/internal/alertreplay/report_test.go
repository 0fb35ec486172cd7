package alertreplay

import (
	"strings"
	"testing"
	"time"
)

// The replay rewrites its own section of BENCHMARKS.md and nothing else: the rest of the
// report comes from other benchmarks that take much longer to run.
func TestReplaySectionIsSplicedBetweenItsMarkersOnly(t *testing.T) {
	rep := &Report{Date: time.Unix(0, 0), Probing: DefaultProbing, EvalEvery: time.Minute,
		Results: []*Result{{Scenario: &Scenario{Name: "quiet", Onset: -1, Phases: []Phase{{Duration: day}}}, Healthy: day}}}
	doc := "# Benchmarks\nbefore\n" + SectionBegin + "\nold table\n" + SectionEnd + "\nafter\n"
	got := rep.Splice(doc)
	if strings.Contains(got, "old table") || !strings.HasPrefix(got, "# Benchmarks\nbefore\n") || !strings.HasSuffix(got, "\nafter\n") {
		t.Errorf("spliced report:\n%s", got)
	}
	if strings.Count(got, SectionBegin) != 1 || !strings.Contains(got, "| quiet |") {
		t.Errorf("section missing or doubled:\n%s", got)
	}
	if again := rep.Splice(got); again != got {
		t.Errorf("a second splice changed the report:\n%s", again)
	}
	if first := rep.Splice("# Benchmarks\n"); !strings.Contains(first, SectionBegin) || !strings.HasPrefix(first, "# Benchmarks\n") {
		t.Errorf("a report without the section did not get it appended:\n%s", first)
	}
}

// False firings are reported per 30 days of healthy time, whatever the replay's length.
func TestFalseFiringsScaleToThirtyDays(t *testing.T) {
	r := &Result{Healthy: 3 * day}
	if got := r.FalsePer30Days(&Firing{False: 2}); got != 20 {
		t.Errorf("2 false firings in 3 days: %.1f per 30 days, want 20", got)
	}
}
