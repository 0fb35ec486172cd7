package bench

import (
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if benchkit.LoopMain() {
		return
	}
	os.Exit(m.Run())
}
