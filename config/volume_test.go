package config

import (
	"strings"
	"testing"
)

func volumeConfig(block string) string {
	return "targets:\n  - name: a\n    path: /tmp\n    volume: " + block + "\n"
}

func TestBadVolumeFieldsNameFileLineAndField(t *testing.T) {
	cases := []struct{ name, block, want string }{
		{"unknown key", "{type: gp3, iopz: 3000}", `diskprobe.yml:4: targets[0].volume: unknown field "iopz"`},
		{"not a mapping", "gp2", `diskprobe.yml:4: targets[0].volume: expected a mapping, got "gp2"`},
		{"empty", "{}", `diskprobe.yml:4: targets[0].volume: give a provider type (one of `},
		{"unknown type", "{type: gp9, size: 1GiB}", `diskprobe.yml:4: targets[0].volume.type: unknown volume type "gp9": use one of `},
		{"type not a string", "{type: [gp2]}", `diskprobe.yml:4: targets[0].volume.type: expected a string, got a list`},
		{"gp2 without size", "{type: gp2}", `diskprobe.yml:4: targets[0].volume: missing field "size": a gp2 volume's limits follow from its size`},
		{"bad size", "{type: gp2, size: 100GB}", `diskprobe.yml:4: targets[0].volume.size: expected a size such as 4096, 4KiB, 64MiB or 1GiB, got "100GB"`},
		{"gp2 with iops", "{type: gp2, size: 100GiB, iops: 500}", `diskprobe.yml:4: targets[0].volume.iops: a gp2 volume's iops follows from its type and size`},
		{"azure with throughput", "{type: azure-p10, throughput: 200MiB}", `diskprobe.yml:4: targets[0].volume.throughput: a azure-p10 volume's throughput follows from its type and size`},
		{"gp3 iops too high", "{type: gp3, iops: 90000}", `diskprobe.yml:4: targets[0].volume.iops: a gp3 volume is provisioned with 3000 to 80000 IOPS, got 90000`},
		{"gp3 throughput too low", "{type: gp3, throughput: 100MiB}", `diskprobe.yml:4: targets[0].volume.throughput: a gp3 volume is provisioned with 125MiB to 2000MiB per second, got 100MiB`},
		{"io1 without iops", "{type: io1}", `diskprobe.yml:4: targets[0].volume: missing field "iops": a io1 volume's IOPS are provisioned`},
		{"iops not a number", "{iops: lots}", `diskprobe.yml:4: targets[0].volume.iops: expected a number of operations per second, got "lots"`},
		{"iops zero", "{iops: 0}", `diskprobe.yml:4: targets[0].volume.iops: must be greater than 0, got 0`},
		{"hetzner without limits", "{type: hetzner}", `diskprobe.yml:4: targets[0].volume: a hetzner volume's limits are not in the table (docs/volumes.md): give iops, throughput, or both`},
		{"burst on a typed volume", "{type: gp3, burst: {iops: 5000, bucket: 1000}}", `diskprobe.yml:4: targets[0].volume.burst: a gp3 volume's burst bucket is the provider's`},
		{"burst unknown key", "{iops: 100, burst: {iops: 1000, bucket: 6, refil: 100}}", `diskprobe.yml:4: targets[0].volume.burst: unknown field "refil"`},
		{"burst without rate", "{iops: 100, burst: {bucket: 60000}}", `diskprobe.yml:4: targets[0].volume.burst: give the burst rate: iops, throughput, or both`},
		{"burst without bucket", "{iops: 100, burst: {iops: 1000}}", `diskprobe.yml:4: targets[0].volume.burst: missing field "bucket"`},
		{"burst below baseline", "{iops: 100, burst: {iops: 50, bucket: 60000}}", `diskprobe.yml:4: targets[0].volume.burst.iops: the burst rate must be above the volume's baseline iops (100), got 50`},
		{"burst in iops without baseline iops", "{throughput: 10MiB, burst: {iops: 500, bucket: 60000}}", `diskprobe.yml:4: targets[0].volume.burst: a burst in iops needs the volume's baseline iops`},
		{"bucket not a number", "{iops: 100, burst: {iops: 1000, bucket: full}}", `diskprobe.yml:4: targets[0].volume.burst.bucket: expected a number of I/O operations, got "full"`},
		{"refill zero", "{iops: 100, burst: {iops: 1000, bucket: 60000, refill: 0}}", `diskprobe.yml:4: targets[0].volume.burst.refill: must be greater than 0, got 0`},
		{"bytes bucket not a size", "{throughput: 10MiB, burst: {throughput: 100MiB, bucket: lots}}", `diskprobe.yml:4: targets[0].volume.burst.bucket: expected a size such as`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(volumeConfig(c.block)), "/etc/diskprobe.yml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("volume: %s\n got %v\nwant %s", c.block, err, c.want)
			}
		})
	}
}

func TestVolumeLimitsFollowTheProviderTable(t *testing.T) {
	cases := []struct {
		block            string
		iops, throughput float64
		burst            *Burst
	}{
		{"{type: gp2, size: 100GiB}", 300, 128 * miBps, &Burst{IOPS: 3000, Bucket: 5.4e6, Refill: 300}},
		{"{type: gp2, size: 10GiB}", 100, 128 * miBps, &Burst{IOPS: 3000, Bucket: 5.4e6, Refill: 100}},
		{"{type: gp2, size: 2TiB}", 6144, 250 * miBps, nil},
		{"{type: gp3}", 3000, 125 * miBps, nil},
		{"{type: gp3, iops: 6000, throughput: 250MiB}", 6000, 250 * miBps, nil},
		{"{type: io2, iops: 20000}", 20000, 0, nil},
		{"{type: st1, size: 2TiB}", 0, 80 * miBps, &Burst{Throughput: 500 * miBps, Bucket: 2 * tib, Refill: 80 * miBps, Bytes: true}},
		{"{type: azure-p10}", 500, 100e6, &Burst{IOPS: 3500, Throughput: 170e6, Bucket: 3000 * 1800, Refill: 500}},
		{"{type: azure-p30}", 5000, 200e6, nil},
		{"{type: pd-ssd, size: 100GiB}", 9000, 288 * miBps, nil},
		{"{type: hetzner, iops: 7500}", 7500, 0, nil},
		{"{iops: 100, burst: {iops: 1000, bucket: 60000}}", 100, 0, &Burst{IOPS: 1000, Bucket: 60000, Refill: 100}},
		{"{iops: 500, throughput: 100MiB, burst: {iops: 3000, bucket: 5400000, refill: 300}}", 500, 100 * miBps, &Burst{IOPS: 3000, Bucket: 5.4e6, Refill: 300}},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(volumeConfig(c.block)), "/etc/diskprobe.yml")
		if err != nil {
			t.Errorf("volume: %s: %v", c.block, err)
			continue
		}
		v := cfg.Targets[0].Volume
		if v.IOPS != c.iops || v.Throughput != c.throughput {
			t.Errorf("volume: %s: %g IOPS %g B/s, want %g and %g", c.block, v.IOPS, v.Throughput, c.iops, c.throughput)
		}
		switch {
		case (v.Burst == nil) != (c.burst == nil):
			t.Errorf("volume: %s: burst %+v, want %+v", c.block, v.Burst, c.burst)
		case c.burst != nil && *v.Burst != *c.burst:
			t.Errorf("volume: %s: burst %+v, want %+v", c.block, *v.Burst, *c.burst)
		}
	}
}
