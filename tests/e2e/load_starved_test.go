package e2e

import "testing"

func TestStarvedProbesTellsAStarvedTargetFromASlowMachine(t *testing.T) {
	// What a loaded 2-CPU machine gave in CI: every target a third of its rounds.
	slowMachine := map[string]float64{"a fsync": 9, "a randread": 8, "b fsync": 9, "b randread": 10, "c fsync": 11, "c randread": 9}
	if got := starvedProbes(slowMachine); len(got) != 0 {
		t.Errorf("a uniformly slow machine read as starvation: %q", got)
	}
	starved := map[string]float64{"a fsync": 30, "a randread": 29, "b fsync": 30, "b randread": 1, "c fsync": 30, "c randread": 8}
	if got := starvedProbes(starved); len(got) != 2 {
		t.Errorf("want b randread (1 round) and c randread (8, under a third of the median 30) named, got %q", got)
	}
	// Two rounds in the whole load phase is the floor, however slow the others were.
	if got := starvedProbes(map[string]float64{"a fsync": 1, "b fsync": 1, "c fsync": 2}); len(got) != 2 {
		t.Errorf("want the probes with a single round named, got %q", got)
	}
}
