package device

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DiskNumber is the device number of the disk named disk (an Info's Disk), from
// <sysfs>/class/block/<disk>/dev: what a node under /dev must carry to be that disk. With
// --path.sysfs pointing at the host's, a container's /dev may hold other devices under the
// same names, and whoever opens a node by name checks its number first.
func (p Paths) DiskNumber(disk string) (major, minor uint32, err error) {
	s := readAttr(filepath.Join(p.sysFS(), "class", "block", strings.ReplaceAll(disk, "/", "!"), "dev"))
	if s == "" {
		return 0, 0, fmt.Errorf("disk %s: no device number in %s/class/block", disk, p.sysFS())
	}
	return parseDevNumber(s)
}
