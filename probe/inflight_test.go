package probe

import (
	"testing"
	"time"
	"unsafe"
)

// wallStepped is now as time.Now reads it after the system's wall clock was stepped by
// step, whole seconds (NTP correcting a drifted host, date -s): the wall reading moved,
// the monotonic one not. Stepping the real clock would disturb everything else on the
// host, and Go has no API for such a reading, so this edits the wall field of a copy of
// now; it fails the test, rather than pass it falsely, if Go lays out time.Time otherwise.
func wallStepped(t *testing.T, now time.Time, step time.Duration) time.Time {
	t.Helper()
	// time.Time with a monotonic reading: wall is 1<<63 | seconds since 1885 << 30 |
	// nanoseconds, ext the monotonic reading.
	type reading struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if unsafe.Sizeof(reading{}) != unsafe.Sizeof(now) || step%time.Second != 0 {
		t.Fatalf("wallStepped: time.Time is not laid out as expected, or step %v is not whole seconds", step)
	}
	stepped := now
	r := (*reading)(unsafe.Pointer(&stepped))
	r.wall += uint64(int64(step/time.Second)) << 30 // two's complement: a negative step subtracts
	if wall, mono := stepped.Round(0).Sub(now.Round(0)), stepped.Sub(now); wall != step || mono != 0 {
		t.Fatalf("wallStepped: the readings moved by %v (wall) and %v (monotonic), want %v and 0", wall, mono, step)
	}
	return stepped
}

// TestInflightAgeIgnoresWallClockSteps: the in-flight age was the wall clock's now minus
// the start's UnixNano, so an NTP step of the clock while an operation was outstanding
// aged it by the step (DiskprobeProbeStuck fired on a healthy disk) or made it negative.
// It is kept on the monotonic clock: a step changes nothing.
func TestInflightAgeIgnoresWallClockSteps(t *testing.T) {
	var in Inflight
	start := time.Now()
	in.begin(start)
	later := start.Add(1500 * time.Millisecond)
	for _, step := range []time.Duration{0, time.Hour, -time.Hour, 10 * time.Second, -24 * time.Hour} {
		if got := in.Age(wallStepped(t, later, step)); got != 1500*time.Millisecond {
			t.Errorf("in-flight age 1.5s into the operation, the wall clock stepped by %v: %v; want 1.5s", step, got)
		}
	}
	// Started after a step, read after another: the age is still the time between the readings.
	in.begin(wallStepped(t, start, -time.Hour))
	if got := in.Age(wallStepped(t, later, 2*time.Hour)); got != 1500*time.Millisecond {
		t.Errorf("in-flight age across two steps: %v; want 1.5s", got)
	}
	in.end()
	if got := in.Age(later); got != 0 {
		t.Errorf("age %v when idle; want 0", got)
	}
	// The epoch's own instant is an operation too, not idle.
	in.begin(inflightEpoch)
	if got := in.Age(inflightEpoch.Add(time.Second)); got != time.Second {
		t.Errorf("age of an operation begun at the epoch: %v; want 1s", got)
	}
}

// BenchmarkInflightMarks is the cost the marks add beside each timed system call.
func BenchmarkInflightMarks(b *testing.B) {
	var in Inflight
	now := time.Now()
	for b.Loop() {
		in.begin(now)
		in.end()
	}
}
