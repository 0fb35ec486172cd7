package bench

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if LoopMain() {
		return
	}
	os.Exit(m.Run())
}
