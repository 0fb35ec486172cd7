package device

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fixture is a fake /proc and /sys laid out like the real ones, symlinks included, so the
// sysfs walking and the mountinfo fallback are tested without root or particular hardware.
type fixture struct {
	t     *testing.T
	paths Paths
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, paths: Paths{ProcFS: filepath.Join(root, "proc"), SysFS: filepath.Join(root, "sys")}}
	for _, d := range []string{"proc/self", "sys/dev/block", "sys/class/block"} {
		f.mkdir(filepath.Join(root, d))
	}
	return f
}

func (f *fixture) mkdir(dir string) {
	f.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) write(path, content string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) symlink(target, link string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		f.t.Fatal(err)
	}
}

// blockDev adds a block device at devPath (relative to /sys, e.g.
// "devices/virtual/block/loop0" or ".../block/sda/sda2") with its dev number and attributes
// (paths relative to the device directory), plus the /sys/dev/block and /sys/class/block links.
func (f *fixture) blockDev(devPath, devNum string, attrs map[string]string) {
	f.t.Helper()
	dir := filepath.Join(f.paths.SysFS, devPath)
	f.write(filepath.Join(dir, "dev"), devNum+"\n")
	for name, content := range attrs {
		f.write(filepath.Join(dir, name), content)
	}
	f.symlink(filepath.Join("..", "..", devPath), filepath.Join(f.paths.SysFS, "dev", "block", devNum))
	f.symlink(filepath.Join("..", "..", devPath), filepath.Join(f.paths.SysFS, "class", "block", filepath.Base(devPath)))
}

// hardwareLink makes <disk>/device point at the parent device directory, as the kernel does
// (…/0:0:0:0/block/sda/device -> ../../../0:0:0:0), and fills that directory.
func (f *fixture) hardwareLink(diskPath, hwPath string, attrs map[string]string) {
	f.t.Helper()
	hwDir := filepath.Join(f.paths.SysFS, hwPath)
	f.mkdir(hwDir)
	for name, content := range attrs {
		f.write(filepath.Join(hwDir, name), content)
	}
	rel, err := filepath.Rel(filepath.Join(f.paths.SysFS, diskPath), hwDir)
	if err != nil {
		f.t.Fatal(err)
	}
	f.symlink(rel, filepath.Join(f.paths.SysFS, diskPath, "device"))
}

// vpd80 is a raw SCSI unit serial number page as the kernel exposes it in device/vpd_pg80.
func vpd80(serial string) string {
	return string([]byte{0x00, 0x80, 0x00, byte(len(serial))}) + serial
}

func (f *fixture) addDisks() {
	const sda = "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda"
	f.blockDev(sda, "8:0", map[string]string{"queue/rotational": "1\n", "queue/logical_block_size": "4096\n"})
	f.hardwareLink(sda, "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0",
		map[string]string{"model": "ST4000NM0035-1V4\n", "vendor": "ATA     \n", "vpd_pg80": vpd80("      ZC18ABCD")})
	f.blockDev(sda+"/sda2", "8:2", map[string]string{"partition": "2\n"})

	// NVMe: model and serial live on the controller, padded with spaces to their field width.
	const nvme = "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1"
	f.blockDev(nvme, "259:0", map[string]string{"queue/rotational": "0\n", "wwid": "eui.0025388b11111111\n"})
	f.hardwareLink(nvme, "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0",
		map[string]string{"model": "Samsung SSD 980 PRO 1TB                 \n", "serial": "S5GXNX0R123456      \n"})
	f.blockDev(nvme+"/nvme0n1p2", "259:2", map[string]string{"partition": "2\n"})

	// virtio-blk puts the serial on the disk itself and has no model.
	const vda = "devices/pci0000:00/0000:00:02.0/virtio1/block/vda"
	f.blockDev(vda, "254:0", map[string]string{"serial": "overlayblk\n", "queue/rotational": "1\n", "queue/logical_block_size": "512\n"})
	f.hardwareLink(vda, "devices/pci0000:00/0000:00:02.0/virtio1", map[string]string{"vendor": "0x1af4\n"})

	// Old SCSI without a serial page: the WWID is the identity left.
	const sdb = "devices/pci0000:00/0000:00:10.0/host2/target2:0:0/2:0:0:0/block/sdb"
	f.blockDev(sdb, "8:16", map[string]string{"queue/rotational": "0\n"})
	f.hardwareLink(sdb, "devices/pci0000:00/0000:00:10.0/host2/target2:0:0/2:0:0:0",
		map[string]string{"model": "Virtual disk    \n", "wwid": "naa.6000c29a1b2c3d4e\n"})
	f.blockDev(sdb+"/sdb1", "8:17", map[string]string{"partition": "1\n"})

	f.blockDev("devices/virtual/block/dm-0", "253:0", map[string]string{"dm/name": "vg-root\n", "queue/rotational": "0\n"})
	f.blockDev("devices/pci0000:00/0000:00:05.0/cciss0/c0d0/block/cciss!c0d0", "104:0", nil)
}

func TestResolveNumberDescribesPartitionsByTheirDisk(t *testing.T) {
	f := newFixture(t)
	f.addDisks()
	for _, tc := range []struct {
		major, minor uint32
		want         Info
	}{
		{8, 2, Info{Name: "sda2", Disk: "sda", Major: 8, Minor: 2, Model: "ST4000NM0035-1V4", Serial: "ZC18ABCD", Rotational: true, LogicalBlockSize: 4096}},
		{8, 0, Info{Name: "sda", Disk: "sda", Major: 8, Minor: 0, Model: "ST4000NM0035-1V4", Serial: "ZC18ABCD", Rotational: true, LogicalBlockSize: 4096}},
		// No queue/logical_block_size: the default 512 stands in.
		{259, 2, Info{Name: "nvme0n1p2", Disk: "nvme0n1", Major: 259, Minor: 2, Model: "Samsung SSD 980 PRO 1TB", Serial: "S5GXNX0R123456", LogicalBlockSize: 512}},
		{254, 0, Info{Name: "vda", Disk: "vda", Major: 254, Minor: 0, Serial: "overlayblk", Rotational: true, LogicalBlockSize: 512}},
		{8, 17, Info{Name: "sdb1", Disk: "sdb", Major: 8, Minor: 17, Model: "Virtual disk", Serial: "naa.6000c29a1b2c3d4e", LogicalBlockSize: 512}},
		{253, 0, Info{Name: "dm-0", Disk: "dm-0", Major: 253, Minor: 0, LogicalBlockSize: 512}},
		// /proc/diskstats says cciss/c0d0 where sysfs says cciss!c0d0.
		{104, 0, Info{Name: "cciss/c0d0", Disk: "cciss/c0d0", Major: 104, Minor: 0, LogicalBlockSize: 512}},
	} {
		got, err := f.paths.resolveNumber(tc.major, tc.minor)
		if err != nil {
			t.Errorf("%d:%d: %v", tc.major, tc.minor, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%d:%d:\n got %+v\nwant %+v", tc.major, tc.minor, got, tc.want)
		}
	}
}

func TestResolveNumberUnknownToSysfsSaysSo(t *testing.T) {
	f := newFixture(t)
	_, err := f.paths.resolveNumber(8, 99)
	if err == nil || !strings.Contains(err.Error(), "8:99") {
		t.Fatalf("want an error naming 8:99, got %v", err)
	}
}

func TestMountinfoFallbackFindsTheLongestMountPrefix(t *testing.T) {
	f := newFixture(t)
	f.addDisks()
	// The paths must exist: Resolve follows symlinks before matching mount points.
	base := t.TempDir()
	for _, d := range []string{"srv/data/x", "srv/data/scratch/y", "srv/database", "srv/my data/z", "srv/nfs/a", "upper", "merged/etc"} {
		f.mkdir(filepath.Join(base, d))
	}
	f.symlink(filepath.Join(base, "srv", "data"), filepath.Join(base, "link-to-data"))
	esc := strings.ReplaceAll(base, " ", `\040`)
	f.write(filepath.Join(f.paths.ProcFS, "self", "mountinfo"), strings.Join([]string{
		`27 1 8:17 / / rw,relatime shared:1 - ext4 /dev/sdb1 rw`,
		`30 27 0:45 /@data ` + esc + `/srv/data rw,relatime shared:5 - btrfs /dev/sda2 rw,ssd,subvolid=256,subvol=/@data`,
		`31 30 0:46 / ` + esc + `/srv/data/scratch rw,nosuid,nodev - tmpfs tmpfs rw,size=1024k`,
		`32 27 0:47 / ` + esc + `/srv/my\040data rw,relatime - btrfs /dev/mapper/vg-root rw`,
		`33 27 0:48 / ` + esc + `/srv/nfs rw,relatime - nfs4 fileserver:/export rw,vers=4.2`,
		// A second mount on the same point hides the first.
		`34 27 0:49 / ` + esc + `/srv/nfs rw,relatime - btrfs /dev/nvme0n1p2 rw`,
		`35 27 0:50 / ` + esc + `/merged rw,relatime - overlay overlay rw,lowerdir=/lower,upperdir=` + esc + `/upper,workdir=/work`,
	}, "\n")+"\n")

	// The overlay's upper directory is on this machine's real filesystem; give its device a
	// place in the fake sysfs so the test does not depend on the machine's disks.
	var st unix.Stat_t
	if err := unix.Stat(base, &st); err != nil {
		t.Fatal(err)
	}
	upperMajor, upperMinor := unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev))
	if upperMajor != 0 {
		// The machine's real number may collide with a fake disk above; the upper layer wins.
		os.Remove(filepath.Join(f.paths.SysFS, "dev", "block", fmt.Sprintf("%d:%d", upperMajor, upperMinor)))
		f.blockDev("devices/virtual/block/upperdisk", fmt.Sprintf("%d:%d", upperMajor, upperMinor), nil)
	}

	for _, tc := range []struct {
		path, wantName, wantErr string
	}{
		{path: "srv/data/x", wantName: "sda2"},
		{path: "srv/data", wantName: "sda2"},
		{path: "link-to-data/x", wantName: "sda2"},
		{path: "srv/database", wantName: "sdb1"}, // /srv/data is not a prefix of /srv/database
		{path: "srv/data/scratch/y", wantErr: "tmpfs at " + base + "/srv/data/scratch has no block device"},
		{path: "srv/my data/z", wantName: "dm-0"},
		{path: "srv/nfs/a", wantName: "nvme0n1p2"},
		{path: "merged/etc", wantName: "upperdisk"},
	} {
		if tc.wantName == "upperdisk" && upperMajor == 0 {
			t.Logf("skipping %s: the temp dir is itself on an anonymous device", tc.path)
			continue
		}
		got, err := f.paths.resolveMount(filepath.Join(base, tc.path), 0)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: want error containing %q, got %v (%+v)", tc.path, tc.wantErr, err, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		if got.Name != tc.wantName {
			t.Errorf("%s: resolved to %q, want %q", tc.path, got.Name, tc.wantName)
		}
	}

	// The NFS mount, once it is the only one on its point, has no device.
	f2 := newFixture(t)
	f2.write(filepath.Join(f2.paths.ProcFS, "self", "mountinfo"),
		`33 27 0:48 / `+esc+`/srv/nfs rw,relatime - nfs4 fileserver:/export rw,vers=4.2`+"\n")
	if _, err := f2.paths.resolveMount(filepath.Join(base, "srv/nfs/a"), 0); err == nil ||
		!strings.Contains(err.Error(), `nfs4 at `+base+`/srv/nfs has no block device (source "fileserver:/export")`) {
		t.Errorf("nfs: want a no-block-device error naming the source, got %v", err)
	}
	// No mount covers the path at all.
	if _, err := f2.paths.resolveMount(filepath.Join(base, "srv/data"), 0); err == nil || !strings.Contains(err.Error(), "no mount") {
		t.Errorf("uncovered path: want a no-mount error, got %v", err)
	}
}

func TestReadStatsParsesDiskstatsLine(t *testing.T) {
	f := newFixture(t)
	f.write(filepath.Join(f.paths.ProcFS, "diskstats"), strings.Join([]string{
		// 4.18 to 5.4: no flush fields.
		`   8       0 sda 1000 10 80000 500 2000 20 160000 900 0 1234 1400 30 0 240 5`,
		// 5.5 and later: all twenty.
		` 259       2 nvme0n1p2 37766 9583 1971242 9352 10556 19522 2264280 4175 0 5112 13884 4541 46 294656 291 1580 64`,
	}, "\n")+"\n")
	got, err := f.paths.ReadStats("nvme0n1p2")
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{ReadIOs: 37766, WriteIOs: 10556, DiscardIOs: 4541, FlushIOs: 1580,
		ReadSectors: 1971242, WriteSectors: 2264280, IOTicks: 5112 * time.Millisecond,
		ReadTime: 9352 * time.Millisecond, WriteTime: 4175 * time.Millisecond, DiscardTime: 291 * time.Millisecond,
		FlushTime: 64 * time.Millisecond, QueueTime: 13884 * time.Millisecond}
	if got != want {
		t.Errorf("nvme0n1p2:\n got %+v\nwant %+v", got, want)
	}
	got, err = f.paths.ReadStats("sda")
	if err != nil {
		t.Fatal(err)
	}
	want = Stats{ReadIOs: 1000, WriteIOs: 2000, DiscardIOs: 30, ReadSectors: 80000, WriteSectors: 160000, IOTicks: 1234 * time.Millisecond,
		ReadTime: 500 * time.Millisecond, WriteTime: 900 * time.Millisecond, DiscardTime: 5 * time.Millisecond,
		QueueTime: 1400 * time.Millisecond}
	if got != want {
		t.Errorf("sda:\n got %+v\nwant %+v", got, want)
	}
	if _, err := f.paths.ReadStats("sdz"); err == nil || !strings.Contains(err.Error(), `"sdz" not found`) {
		t.Errorf("unknown device: want a not-found error, got %v", err)
	}
}

func TestMountPointWithASpaceIsFoundInMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/var/lib/etcd`: "/var/lib/etcd", `/mnt/etcd\040disk`: "/mnt/etcd disk", `/a\134b\011c`: "/a\\b\tc", `/trailing\04`: `/trailing\04`} {
		if got := UnescapeMountinfo(in); got != want {
			t.Errorf("UnescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
