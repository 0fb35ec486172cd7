package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/ebsnvme"
	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// sysfsCallingItEBS is a /sys that knows one block device, dev, by its real number and
// name, and says its controller's model is an EBS volume's: the real binary then takes
// it for one, and what it does with a device that is not NVMe is what it would do with
// an EBS volume it cannot read as expected.
func sysfsCallingItEBS(t *testing.T, dev string) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(dev, &st))
	name := filepath.Base(dev)
	number := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	sys := filepath.Join(t.TempDir(), "sys")
	disk := filepath.Join(sys, "devices", "virtual", "block", name)
	for file, content := range map[string]string{
		"dev":                      number,
		"device/model":             ebsnvme.Model + "                ", // padded, as NVMe pads it
		"queue/logical_block_size": "512",
		"queue/rotational":         "0",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(disk, file)), 0o755))
		must(t, os.WriteFile(filepath.Join(disk, file), []byte(content+"\n"), 0o644))
	}
	for _, link := range []string{filepath.Join(sys, "dev", "block", number), filepath.Join(sys, "class", "block", name)} {
		must(t, os.MkdirAll(filepath.Dir(link), 0o755))
		must(t, os.Symlink(disk, link))
	}
	return sys
}

// TestEBSStatisticsOfADeviceThatIsNotNVMeAreRefusedCleanly runs the real binary on a loop
// device that sysfs calls an EBS volume: its statistics read (off the scrape path) opens
// the node read-only and is refused at NVME_IOCTL_ID, before any admin command; the log
// says so, nothing is written to the device, the probes go on, and no EBS series appears.
// (That the log says it once, not at every read, is collector's
// TestAnEBSReadThatKeepsFailingIsLoggedOnce.)
func TestEBSStatisticsOfADeviceThatIsNotNVMeAreRefusedCleanly(t *testing.T) {
	dev := testenv.LoopDevice(t, 16*mib)
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: vol
    path: %s
    randread: {interval: 1s, ops: 2}
`, dev))
	before := stats(t, dev)
	e := framework.StartExporter(t, cfg, "--path.sysfs="+sysfsCallingItEBS(t, dev))

	// The first read comes at the loop's first tick, 10 s after start.
	waitLog(t, e, 60*time.Second, "cannot read the EBS volume's own statistics")
	log := e.Log.String()
	if !strings.Contains(log, "not an NVMe namespace") {
		t.Errorf("the refusal does not say why:\n%s", log)
	}
	f := e.MustScrape()
	if metric(f, "diskprobe_target_info", "target", "vol", "model", ebsnvme.Model) != 1 {
		t.Errorf("the fixture did not make the device an EBS volume for the exporter")
	}
	for name := range f {
		if strings.HasPrefix(name, "diskprobe_ebs_") {
			t.Errorf("%s exposed for a device whose statistics could not be read", name)
		}
	}
	noErrors(t, f, "vol", "randread")
	if after := stats(t, dev); after.WriteIOs != before.WriteIOs {
		t.Errorf("%d writes to %s", after.WriteIOs-before.WriteIOs, dev)
	}
}
