// Package device tells which block device a target path lives on, describes it from sysfs, and
// samples its /proc/diskstats counters. It has no Prometheus client imports: the collector turns
// what it returns into metrics.
package device

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Paths are the roots of /proc and /sys (node_exporter's --path.procfs / --path.sysfs), so tests
// can point at fixtures and containers at the host's mounts. Empty fields mean "/proc" and "/sys".
type Paths struct{ ProcFS, SysFS string }

func (p Paths) procFS() string {
	if p.ProcFS == "" {
		return "/proc"
	}
	return p.ProcFS
}

func (p Paths) sysFS() string {
	if p.SysFS == "" {
		return "/sys"
	}
	return p.SysFS
}

// Info describes the block device a target lives on.
type Info struct {
	Name             string // kernel name of the device holding the data, as in /proc/diskstats: "nvme0n1p2", "loop3"
	Disk             string // the whole disk: parent of a partition, else Name
	Major, Minor     uint32 // of Name
	Model, Serial    string // of Disk, from sysfs; "" when unknown
	Rotational       bool   // Disk's queue/rotational
	LogicalBlockSize int64  // Disk's queue/logical_block_size, 512 when unreadable
}

// maxOverlayDepth bounds following an overlay's upperdir to the filesystem below it; one level
// is the common case (a container's root), the bound only guards against a loop.
const maxOverlayDepth = 2

// Resolve finds the block device behind path: st_rdev for a block device node, st_dev for
// anything else, looked up in <sysfs>/dev/block/MAJ:MIN. Filesystems with anonymous device
// numbers (major 0: btrfs, overlayfs, NFS, tmpfs) fall back to the mount in
// <procfs>/self/mountinfo whose mount point is the longest prefix of path, and its source device.
func (p Paths) Resolve(path string) (Info, error) {
	return p.resolve(path, 0)
}

func (p Paths) resolve(path string, depth int) (Info, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Info{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	dev := uint64(st.Dev)
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		dev = uint64(st.Rdev)
	}
	major, minor := unix.Major(dev), unix.Minor(dev)
	if major == 0 {
		return p.resolveMount(path, depth)
	}
	info, err := p.resolveNumber(major, minor)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// resolveNumber describes the device MAJ:MIN from sysfs.
func (p Paths) resolveNumber(major, minor uint32) (Info, error) {
	link := filepath.Join(p.sysFS(), "dev", "block", fmt.Sprintf("%d:%d", major, minor))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return Info{}, fmt.Errorf("device %d:%d is not a block device known to sysfs: %w", major, minor, err)
	}
	info := Info{Name: kernelName(filepath.Base(dir)), Major: major, Minor: minor}
	// In sysfs a partition is a child directory of its disk and the only one with a partition file.
	diskDir := dir
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		diskDir = filepath.Dir(dir)
	}
	info.Disk = kernelName(filepath.Base(diskDir))
	info.Model = firstAttr(diskDir, "device/model", "device/name")
	info.Serial = serial(diskDir)
	info.Rotational = readAttr(filepath.Join(diskDir, "queue", "rotational")) == "1"
	info.LogicalBlockSize = 512
	if n, err := strconv.ParseInt(readAttr(filepath.Join(diskDir, "queue", "logical_block_size")), 10, 64); err == nil && n > 0 {
		info.LogicalBlockSize = n
	}
	return info, nil
}

// resolveMount handles anonymous device numbers, which sysfs does not know: the mount's source
// names the real device for btrfs; tmpfs, NFS and the like have none.
func (p Paths) resolveMount(path string, depth int) (Info, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Info{}, err
	}
	// Mount points in mountinfo are canonical; a symlink in path would match the wrong mount.
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return Info{}, err
	}
	fs, err := procfs.NewFS(p.procFS())
	if err != nil {
		return Info{}, err
	}
	mounts, err := fs.GetMounts()
	if err != nil {
		return Info{}, fmt.Errorf("%s: reading mountinfo: %w", path, err)
	}
	m := longestPrefixMount(mounts, abs)
	if m == nil {
		return Info{}, fmt.Errorf("%s has an anonymous device number and no mount in %s/self/mountinfo covers it", path, p.procFS())
	}
	mountPoint, source := UnescapeMountinfo(m.MountPoint), UnescapeMountinfo(m.Source)
	noDevice := fmt.Errorf("%s: %s at %s has no block device (source %q)", path, m.FSType, mountPoint, source)

	// A container's root is an overlay; its writes land on the upper layer's filesystem.
	if upper := m.SuperOptions["upperdir"]; m.FSType == "overlay" && upper != "" && depth < maxOverlayDepth {
		if info, err := p.resolve(UnescapeMountinfo(upper), depth+1); err == nil {
			return info, nil
		}
		return Info{}, noDevice
	}
	if !strings.HasPrefix(source, "/") {
		return Info{}, noDevice
	}
	major, minor, err := p.sourceNumber(source)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %s at %s: source %s: %w", path, m.FSType, mountPoint, source, err)
	}
	info, err := p.resolveNumber(major, minor)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %s at %s: %w", path, m.FSType, mountPoint, err)
	}
	return info, nil
}

// longestPrefixMount returns the mount whose mount point is the longest path-component prefix
// of abs; among equal ones the last, because a later mount on the same point hides earlier ones.
func longestPrefixMount(mounts []*procfs.MountInfo, abs string) *procfs.MountInfo {
	var best *procfs.MountInfo
	bestLen := -1
	for _, m := range mounts {
		mp := UnescapeMountinfo(m.MountPoint)
		if !pathHasPrefix(abs, mp) {
			continue
		}
		if len(mp) >= bestLen {
			best, bestLen = m, len(mp)
		}
	}
	return best
}

// pathHasPrefix reports whether dir is path or one of its ancestors: /srv/data covers
// /srv/data/x but not /srv/database.
func pathHasPrefix(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// sourceNumber finds MAJ:MIN of a mount source such as /dev/sda2 or /dev/mapper/vg-root. Sysfs
// comes first because with --path.sysfs pointing at the host, our own /dev may not be the host's.
func (p Paths) sourceNumber(source string) (uint32, uint32, error) {
	sys := p.sysFS()
	if strings.HasPrefix(source, "/dev/mapper/") {
		want := strings.TrimPrefix(source, "/dev/mapper/")
		names, _ := filepath.Glob(filepath.Join(sys, "class", "block", "dm-*", "dm", "name"))
		for _, n := range names {
			if readAttr(n) == want {
				return parseDevNumber(readAttr(filepath.Join(filepath.Dir(filepath.Dir(n)), "dev")))
			}
		}
	} else if strings.HasPrefix(source, "/dev/") {
		name := strings.ReplaceAll(strings.TrimPrefix(source, "/dev/"), "/", "!")
		if s := readAttr(filepath.Join(sys, "class", "block", name, "dev")); s != "" {
			return parseDevNumber(s)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(source, &st); err != nil {
		return 0, 0, fmt.Errorf("not found in %s/class/block and not a device node here: %w", sys, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, 0, errors.New("not a block device")
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), nil
}

func parseDevNumber(s string) (uint32, uint32, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("malformed device number %q", s)
	}
	major, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed device number %q", s)
	}
	minor, err := strconv.ParseUint(min, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed device number %q", s)
	}
	return uint32(major), uint32(minor), nil
}

// UnescapeMountinfo undoes the kernel's octal escapes (\040 for a space) in mountinfo fields.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kernelName turns a sysfs directory name into the name /proc/diskstats uses: sysfs replaces
// the '/' in names like cciss/c0d0 with '!'.
func kernelName(sysfsName string) string {
	return strings.ReplaceAll(sysfsName, "!", "/")
}

// serial tries the cheap places drivers put a disk's serial: NVMe, MMC and SATA-behind-some-HBAs
// under device/, virtio-blk on the disk itself, SCSI in VPD page 0x80, and the WWID last, which
// is not a serial but identifies the disk just as well for an operator.
func serial(diskDir string) string {
	if s := firstAttr(diskDir, "device/serial", "serial"); s != "" {
		return s
	}
	if b, err := os.ReadFile(filepath.Join(diskDir, "device", "vpd_pg80")); err == nil {
		if s := parseVPD80(b); s != "" {
			return s
		}
	}
	return firstAttr(diskDir, "wwid", "device/wwid")
}

// parseVPD80 extracts the unit serial number from a raw SCSI VPD page 0x80: a 4-byte header
// whose bytes 2-3 are the length, then the serial in ASCII, often padded with spaces.
func parseVPD80(b []byte) string {
	if len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	b = b[4:]
	if n < len(b) {
		b = b[:n]
	}
	return trimAttr(string(b))
}

func firstAttr(dir string, names ...string) string {
	for _, n := range names {
		if s := readAttr(filepath.Join(dir, n)); s != "" {
			return s
		}
	}
	return ""
}

// readAttr reads a small sysfs attribute; a missing or unreadable one is "" because most
// attributes exist only for some drivers.
func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return trimAttr(string(b))
}

func trimAttr(s string) string {
	return strings.Trim(s, " \t\n\x00")
}
