package integration

import (
	"os"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// TestMain removes the exporter binary the package's tests share once they are done.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m.Run)) }
