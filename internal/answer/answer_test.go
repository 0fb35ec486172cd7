package answer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestAHungPathNeverGetsASecondCall asks a path whose call hangs again and again, as
// reloads do: every ask returns after its wait, and only one call is ever started until
// the first returns; after that the path is asked afresh.
func TestAHungPathNeverGetsASecondCall(t *testing.T) {
	var p Paths
	release := make(chan struct{})
	var started atomic.Int32
	hung := func() { started.Add(1); <-release }
	for range 5 {
		t0 := time.Now()
		if p.Call(context.Background(), "/hung", 20*time.Millisecond, hung) {
			t.Fatal("a hung call reported as answered")
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("Call waited %s with a 20ms wait", d)
		}
	}
	if n := started.Load(); n != 1 || p.outstanding() != 1 {
		t.Fatalf("%d calls started, %d outstanding on a hung path; want 1 and 1", n, p.outstanding())
	}
	// Another path is not held up by the hung one.
	if !p.Call(context.Background(), "/healthy", time.Second, func() {}) {
		t.Fatal("a healthy path did not answer")
	}
	close(release)
	var answered bool
	if !p.Call(context.Background(), "/hung", 5*time.Second, func() { answered = true }) || !answered {
		t.Fatal("the released path was not asked again")
	}
	if n := started.Load(); n != 1 {
		t.Fatalf("%d hung calls started", n)
	}
}

func TestCallEndsWithItsContext(t *testing.T) {
	var p Paths
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if p.Call(ctx, "/hung", 0, func() { <-release }) {
		t.Fatal("answered")
	}
}
