package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Volume is what a target's volume was sold as (its `volume:` block): the provider's
// limits, from the type and size (volumeTypes) or as the file states them. The ceiling
// the exporter recognises from the device's counters needs none of it; with it, the
// exporter also exports the limits and, for a volume with a burst bucket, the estimated
// balance and time until the bucket is empty.
type Volume struct {
	Type       string  // as written (gp2, azure-p10, ...); "custom" for plain limits
	Size       int64   // bytes; 0 when not given
	IOPS       float64 // baseline IOPS; 0 when the volume has no IOPS limit stated
	Throughput float64 // baseline bytes/s; 0 when none is stated
	Burst      *Burst  // nil when the volume has no burst bucket
}

// Burst is a volume's burst bucket: it holds up to Bucket credits, earns Refill a
// second, and spends one per I/O (or per byte, when Bytes) the device completes; while
// it holds any, the volume may run at IOPS and Throughput (0: not stated).
type Burst struct {
	IOPS, Throughput float64
	Bucket, Refill   float64
	Bytes            bool
}

// TypeCustom is the type of a volume block that states its limits itself.
const TypeCustom = "custom"

// volumeType is one row of the provider table: how a type's limits follow from its size
// and from what the file states. docs/volumes.md gives every figure with its source.
type volumeType struct {
	needsSize bool          // the limits follow from the size: `size` is required
	provision *provisioning // the file may (or must) state iops/throughput, within bounds; nil: the type fixes them
	limits    func(v *Volume)
}

type provisioning struct {
	iopsMin, iopsMax, iopsDefault float64 // iopsDefault 0: `iops` is required
	throughputMin, throughputMax  float64 // bytes/s; 0: `throughput` not bounded
	throughputDefault             float64
}

const (
	miBps = float64(MiB) // one MiB/s in bytes/s
	mBps  = 1e6          // one MB/s: Azure states its limits in MB/s
	tib   = float64(1 << 40)
)

func gib(v *Volume) float64 { return float64(v.Size) / GiB }

var volumeTypes = map[string]volumeType{
	// AWS EBS.
	"gp2": {needsSize: true, limits: func(v *Volume) {
		v.IOPS = min(max(3*math.Ceil(gib(v)), 100), 16000)
		v.Throughput = 250 * miBps
		if gib(v) <= 170 {
			v.Throughput = 128 * miBps
		}
		if v.IOPS < 3000 { // 1 TiB and over, the baseline is the burst: no bucket
			v.Burst = &Burst{IOPS: 3000, Bucket: 5.4e6, Refill: v.IOPS}
		}
	}},
	"gp3": {provision: &provisioning{iopsMin: 3000, iopsMax: 80000, iopsDefault: 3000,
		throughputMin: 125 * miBps, throughputMax: 2000 * miBps, throughputDefault: 125 * miBps}},
	"io1": {provision: &provisioning{iopsMin: 100, iopsMax: 64000}},
	"io2": {provision: &provisioning{iopsMin: 100, iopsMax: 256000}},
	"st1": {needsSize: true, limits: func(v *Volume) { hddBurst(v, 40, 250, 500) }},
	"sc1": {needsSize: true, limits: func(v *Volume) { hddBurst(v, 12, 80, 250) }},
	// GCP Persistent Disk: per GiB, plus a baseline for balanced and SSD.
	"pd-standard": {needsSize: true, limits: func(v *Volume) {
		v.IOPS = 1.5 * gib(v) // writes; reads 0.75 per GiB
		v.Throughput = 0.12 * gib(v) * miBps
	}},
	"pd-balanced": {needsSize: true, limits: func(v *Volume) {
		v.IOPS = 3000 + 6*gib(v)
		v.Throughput = (140 + 0.28*gib(v)) * miBps
	}},
	"pd-ssd": {needsSize: true, limits: func(v *Volume) {
		v.IOPS = 6000 + 30*gib(v)
		v.Throughput = (240 + 0.48*gib(v)) * miBps
	}},
	// Hetzner Cloud volumes have flat limits, the same for every size; they are not
	// published in a form this table could cite (docs/volumes.md): state them.
	"hetzner": {provision: &provisioning{}},
}

// hddBurst sets an st1/sc1 volume's limits: throughput per TiB of size, baseline and
// burst, the burst capped per volume, and a bucket of 1 TiB of credits per TiB.
func hddBurst(v *Volume, basePerTiB, burstPerTiB, burstMax float64) {
	tibs := float64(v.Size) / tib
	v.Throughput = basePerTiB * tibs * miBps
	v.Burst = &Burst{Throughput: min(burstPerTiB*tibs, burstMax) * miBps, Bucket: tibs * tib, Refill: v.Throughput, Bytes: true}
}

// azureTiers are Azure Premium SSD's P-tiers: size, provisioned IOPS and MB/s. P1–P20
// burst on credits to 3,500 IOPS and 170 MB/s for 30 minutes from a full bucket.
var azureTiers = map[string]struct {
	gib, iops, mbps float64
}{
	"p1": {4, 120, 25}, "p2": {8, 120, 25}, "p3": {16, 120, 25}, "p4": {32, 120, 25}, "p6": {64, 240, 50},
	"p10": {128, 500, 100}, "p15": {256, 1100, 125}, "p20": {512, 2300, 150}, "p30": {1024, 5000, 200},
	"p40": {2048, 7500, 250}, "p50": {4096, 7500, 250}, "p60": {8192, 16000, 500}, "p70": {16384, 18000, 750},
	"p80": {32767, 20000, 900},
}

const (
	azureBurstIOPS     = 3500
	azureBurstMBps     = 170
	azureBurstDuration = 30 * 60 // seconds at the burst rate a full bucket lasts
)

func init() {
	for name, p := range azureTiers {
		volumeTypes["azure-"+name] = volumeType{limits: func(v *Volume) {
			v.IOPS, v.Throughput = p.iops, p.mbps*mBps
			if p.gib <= 512 {
				// Spent above the baseline, a full bucket lasts 30 minutes at the burst.
				v.Burst = &Burst{IOPS: azureBurstIOPS, Throughput: azureBurstMBps * mBps,
					Bucket: (azureBurstIOPS - p.iops) * azureBurstDuration, Refill: p.iops}
			}
		}}
	}
}

// VolumeTypes lists the provider types a volume block takes, sorted.
func VolumeTypes() []string {
	var names []string
	for n := range volumeTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// volume reads a target's `volume:` block.
func (p *parser) volume(n *yaml.Node, field string) *Volume {
	v := &Volume{Type: TypeCustom}
	var typeNode, sizeNode, iopsNode, throughputNode, burstNode *yaml.Node
	before := len(p.errs)
	p.mapping(n, field, func(key string, _, val *yaml.Node) bool {
		f := join(field, key)
		switch key {
		case "type":
			typeNode = val
			v.Type = p.str(val, f)
		case "size":
			sizeNode = val
			v.Size, _ = p.size(val, f)
		case "iops":
			iopsNode = val
			v.IOPS = p.rate(val, f)
		case "throughput":
			throughputNode = val
			if s, ok := p.size(val, f); ok {
				v.Throughput = float64(s)
			}
		case "burst":
			burstNode = val
		default:
			return false
		}
		return true
	})
	if len(p.errs) > before || n.Kind != yaml.MappingNode {
		return nil
	}
	if typeNode == nil {
		// Plain limits.
		if iopsNode == nil && throughputNode == nil {
			p.errorf(n, field, "give a provider type (one of %s) or the volume's limits: iops, throughput, or both", strings.Join(VolumeTypes(), ", "))
			return nil
		}
		if burstNode != nil {
			v.Burst = p.burst(burstNode, join(field, "burst"), v)
		}
		if len(p.errs) > before {
			return nil
		}
		return v
	}
	t, ok := volumeTypes[v.Type]
	if !ok {
		p.errorf(typeNode, join(field, "type"), "unknown volume type %q: use one of %s, or leave type out and give iops and throughput", v.Type, strings.Join(VolumeTypes(), ", "))
		return nil
	}
	if burstNode != nil {
		p.errorf(burstNode, join(field, "burst"), "a %s volume's burst bucket is the provider's (docs/volumes.md): burst is for a volume without a type", v.Type)
	}
	if t.needsSize && sizeNode == nil {
		p.errorf(n, field, "missing field \"size\": a %s volume's limits follow from its size", v.Type)
	}
	if t.provision == nil {
		for _, kv := range []struct {
			key  string
			node *yaml.Node
		}{{"iops", iopsNode}, {"throughput", throughputNode}} {
			if kv.node != nil {
				p.errorf(kv.node, join(field, kv.key), "a %s volume's %s follows from its type and size: leave it out, or leave type out to state the limits yourself", v.Type, kv.key)
			}
		}
	} else {
		p.provisioned(v, t.provision, field, n, iopsNode, throughputNode)
	}
	if len(p.errs) > before {
		return nil
	}
	if t.limits != nil {
		t.limits(v)
	}
	return v
}

// provisioned checks the iops and throughput a provisioned type's block states.
func (p *parser) provisioned(v *Volume, pr *provisioning, field string, n, iopsNode, throughputNode *yaml.Node) {
	switch {
	case iopsNode == nil && pr.iopsMax > 0 && pr.iopsDefault == 0:
		p.errorf(n, field, "missing field \"iops\": a %s volume's IOPS are provisioned", v.Type)
	case iopsNode == nil:
		v.IOPS = pr.iopsDefault
	case pr.iopsMax > 0 && (v.IOPS < pr.iopsMin || v.IOPS > pr.iopsMax):
		p.errorf(iopsNode, join(field, "iops"), "a %s volume is provisioned with %g to %g IOPS, got %s", v.Type, pr.iopsMin, pr.iopsMax, iopsNode.Value)
	}
	switch {
	case throughputNode == nil:
		v.Throughput = pr.throughputDefault
	case pr.throughputMax > 0 && (v.Throughput < pr.throughputMin || v.Throughput > pr.throughputMax):
		p.errorf(throughputNode, join(field, "throughput"), "a %s volume is provisioned with %s to %s per second, got %s", v.Type,
			FormatSize(int64(pr.throughputMin)), FormatSize(int64(pr.throughputMax)), throughputNode.Value)
	}
	if pr.iopsMax == 0 && iopsNode == nil && throughputNode == nil {
		p.errorf(n, field, "a %s volume's limits are not in the table (docs/volumes.md): give iops, throughput, or both", v.Type)
	}
}

// burst reads the burst bucket of a volume with plain limits.
func (p *parser) burst(n *yaml.Node, field string, v *Volume) *Burst {
	b := &Burst{}
	var iopsNode, throughputNode, bucketNode, refillNode *yaml.Node
	before := len(p.errs)
	p.mapping(n, field, func(key string, _, val *yaml.Node) bool {
		switch key {
		case "iops":
			iopsNode = val
		case "throughput":
			throughputNode = val
		case "bucket":
			bucketNode = val
		case "refill":
			refillNode = val
		default:
			return false
		}
		return true
	})
	if len(p.errs) > before {
		return nil
	}
	if iopsNode == nil && throughputNode == nil {
		p.errorf(n, field, "give the burst rate: iops, throughput, or both")
		return nil
	}
	if iopsNode != nil {
		b.IOPS = p.rate(iopsNode, join(field, "iops"))
	}
	if throughputNode != nil {
		if s, ok := p.size(throughputNode, join(field, "throughput")); ok {
			b.Throughput = float64(s)
		}
	}
	// The bucket counts I/Os when the burst is in IOPS, else bytes.
	b.Bytes = iopsNode == nil
	baseline, unit, burstRate := v.IOPS, "iops", b.IOPS
	if b.Bytes {
		baseline, unit, burstRate = v.Throughput, "throughput", b.Throughput
	}
	if len(p.errs) > before {
		return nil
	}
	if baseline == 0 {
		p.errorf(n, field, "a burst in %s needs the volume's baseline %s", unit, unit)
		return nil
	}
	if burstRate <= baseline {
		p.errorf(n, join(field, unit), "the burst rate must be above the volume's baseline %s (%g), got %g", unit, baseline, burstRate)
	}
	if bucketNode == nil {
		p.errorf(n, field, "missing field \"bucket\": how many credits (I/Os, or bytes for a throughput burst) a full bucket holds")
	} else {
		b.Bucket = p.credits(bucketNode, join(field, "bucket"), b.Bytes)
	}
	b.Refill = baseline
	if refillNode != nil {
		b.Refill = p.credits(refillNode, join(field, "refill"), b.Bytes)
	}
	if len(p.errs) > before {
		return nil
	}
	return b
}

// rate reads a positive number of operations per second.
func (p *parser) rate(n *yaml.Node, field string) float64 {
	x, err := strconv.ParseFloat(n.Value, 64)
	switch {
	case n.Kind != yaml.ScalarNode || err != nil || math.IsNaN(x) || math.IsInf(x, 0):
		p.errorf(n, field, "expected a number of operations per second, got %s", nodeKind(n))
	case x <= 0:
		p.errorf(n, field, "must be greater than 0, got %s", n.Value)
	default:
		return x
	}
	return 0
}

// credits reads a positive count of credits: I/Os, or a size for a bucket of bytes.
func (p *parser) credits(n *yaml.Node, field string, bytes bool) float64 {
	if bytes {
		s, _ := p.size(n, field)
		return float64(s)
	}
	x, err := strconv.ParseFloat(n.Value, 64)
	switch {
	case n.Kind != yaml.ScalarNode || err != nil || math.IsNaN(x) || math.IsInf(x, 0):
		p.errorf(n, field, "expected a number of I/O operations, got %s", nodeKind(n))
	case x <= 0:
		p.errorf(n, field, "must be greater than 0, got %s", n.Value)
	default:
		return x
	}
	return 0
}

// String is the volume as `--config.check` says it.
func (v *Volume) String() string {
	return v.Type + ": " + limits(v.IOPS, v.Throughput) + burstString(v.Burst)
}

func burstString(b *Burst) string {
	if b == nil {
		return ""
	}
	unit := "I/Os"
	if b.Bytes {
		unit = "bytes"
	}
	return fmt.Sprintf(", bursting to %s from a bucket of %.0f %s", limits(b.IOPS, b.Throughput), b.Bucket, unit)
}

func limits(iops, bytesPerSecond float64) string {
	var parts []string
	if iops > 0 {
		parts = append(parts, fmt.Sprintf("%g IOPS", iops))
	}
	if bytesPerSecond > 0 {
		parts = append(parts, FormatSize(int64(bytesPerSecond))+"/s")
	}
	return strings.Join(parts, " and ")
}
