package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// inflightCollector reports, at scrape time, the age of each target's outstanding
// operation. It reads atomics only, so a scrape never waits on a target's disk.
type inflightCollector struct {
	desc      *prometheus.Desc
	scheduler *Scheduler
}

func newInflightCollector() *inflightCollector {
	return &inflightCollector{desc: prometheus.NewDesc(namespace+"_probe_inflight_seconds",
		"Age of the probe's outstanding I/O operation, 0 when idle. It keeps growing while an operation is stuck in the kernel.",
		[]string{"target", "probe"}, nil)}
}

func (c *inflightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *inflightCollector) Collect(ch chan<- prometheus.Metric) {
	if c.scheduler == nil {
		return
	}
	now := time.Now()
	for _, r := range c.scheduler.running() {
		name, age := r.outstanding(now)
		shown := name == ""
		for _, pr := range r.probes {
			v := 0.0
			if pr.name == name {
				v, shown = age.Seconds(), true
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, r.name, pr.name)
		}
		if !shown { // a probe the reload removed, stuck since before it
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, age.Seconds(), r.name, name)
		}
	}
}
