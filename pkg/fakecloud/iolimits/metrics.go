package iolimits

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// Collector reports each limited volume's counters (Stats) at scrape time, for fakecloud's registry.
func (p *Policy) Collector() prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"volume_id"}, nil)
	}
	return &collector{p: p,
		exceededIOPS: desc("diskforge_fakecloud_volume_exceeded_iops_seconds_total",
			"Time the volume had I/O held at its provisioned IOPS (overlapping waits counted once)."),
		exceededThroughput: desc("diskforge_fakecloud_volume_exceeded_throughput_seconds_total",
			"Time the volume had I/O held at its provisioned throughput (overlapping waits counted once)."),
		throttled: desc("diskforge_fakecloud_volume_throttled_ios_total",
			"I/O requests of the volume held at its provisioned IOPS or throughput."),
	}
}

type collector struct {
	p                                           *Policy
	exceededIOPS, exceededThroughput, throttled *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.exceededIOPS
	ch <- c.exceededThroughput
	ch <- c.throttled
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.p.volumes.Range(func(key, _ any) bool {
		id := key.(string)
		st, ok := c.p.Stats(id)
		if !ok {
			return true
		}
		ch <- prometheus.MustNewConstMetric(c.exceededIOPS, prometheus.CounterValue, st.ExceededIOPS.Seconds(), id)
		ch <- prometheus.MustNewConstMetric(c.exceededThroughput, prometheus.CounterValue, st.ExceededThroughput.Seconds(), id)
		ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(st.Waits), id)
		return true
	})
}

// Report keys of the volume's report file (fuseblock.Reporter): nanoseconds held at the IOPS and throughput
// limits, ExceededIOPS and ExceededThroughput, as 20 digits so that the report's length never changes. A node
// plugin that sees fakecloud's FUSE mount reads them (docs/driver.md, Metrics).
const (
	ReportExceededIOPS       = "exceeded_iops_ns"
	ReportExceededThroughput = "exceeded_throughput_ns"
)

var _ fuseblock.Reporter = (*Policy)(nil)

// Report is the volume's exceeded times, or false while its limits are not known.
func (p *Policy) Report(volumeID string) ([]byte, bool) {
	st, ok := p.Stats(volumeID)
	if !ok {
		return nil, false
	}
	return fmt.Appendf(nil, "%s %020d\n%s %020d\n", ReportExceededIOPS, st.ExceededIOPS.Nanoseconds(),
		ReportExceededThroughput, st.ExceededThroughput.Nanoseconds()), true
}
