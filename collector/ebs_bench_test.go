package collector

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/device"
)

// BenchmarkEBSCollectAt10000OtherTargets is what the EBS collector adds to a scrape of
// 10,000 targets none of which is on an EBS volume: a walk over the runners' device
// identity, no series.
//
//	go test -run '^$' -bench EBSCollect -benchmem ./collector
func BenchmarkEBSCollectAt10000OtherTargets(b *testing.B) {
	s := &Scheduler{}
	rs := make([]*runner, 10_000)
	for i := range rs {
		r := &runner{name: fmt.Sprintf("t%d", i)}
		r.worker.dev, r.worker.devOK = device.Info{Name: "sda", Disk: "sda", Model: "Samsung SSD 870 EVO 1TB"}, true
		r.status.inspected.Store(true)
		rs[i] = r
	}
	s.snapshot.Store(&rs)
	c := newEBSCollector()
	c.volumes = newEBSVolumes(device.Paths{}, s.ebsTargets, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ch := make(chan prometheus.Metric, 1)
	b.ReportAllocs()
	for b.Loop() {
		c.Collect(ch)
	}
}
