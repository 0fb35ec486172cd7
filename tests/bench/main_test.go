package bench

import (
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/internal/benchkit"

	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if benchkit.LoopMain() {
		return
	}
	os.Exit(testenv.Main(m.Run))
}
