package driver

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/blockstat"
)

// Per-volume metric names: the block device's statistics of each volume staged on the node.
const (
	metricVolumeReadOps      = "diskforge_node_volume_read_ops_total"
	metricVolumeWriteOps     = "diskforge_node_volume_write_ops_total"
	metricVolumeReadBytes    = "diskforge_node_volume_read_bytes_total"
	metricVolumeWriteBytes   = "diskforge_node_volume_write_bytes_total"
	metricVolumeReadSeconds  = "diskforge_node_volume_read_seconds_total"
	metricVolumeWriteSeconds = "diskforge_node_volume_write_seconds_total"
	metricVolumeQueueLength  = "diskforge_node_volume_queue_length"
	// The time the volume was held at its provisioned IOPS and throughput, where this node can read it: a
	// fakecloud FUSE volume whose mount the node sees (volumeExceeded).
	metricVolumeExceededIOPS       = "diskforge_node_volume_exceeded_iops_seconds_total"
	metricVolumeExceededThroughput = "diskforge_node_volume_exceeded_throughput_seconds_total"
)

// volumeMetricLabels name the volume and its claim; the claim's labels are those of kubelet's
// kubelet_volume_stats_* series, so that the two join. They are empty for a volume whose volume context does
// not name its claim.
var volumeMetricLabels = []string{"volume_id", "namespace", "persistentvolumeclaim"}

// volumeCollector reports the I/O statistics of the volumes staged on the node, read from their devices when
// scraped: there is nothing to keep between scrapes, and a volume unstaged meanwhile is simply not reported.
type volumeCollector struct {
	n                                   *NodeServer
	readOps, writeOps                   *prometheus.Desc
	readBytes, writeBytes               *prometheus.Desc
	readSeconds, writeSeconds, inFlight *prometheus.Desc
	exceededIOPS, exceededThroughput    *prometheus.Desc
}

// Collector is the node's per-volume metrics collector, for the caller's registry.
func (n *NodeServer) Collector() prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, volumeMetricLabels, nil)
	}
	return &volumeCollector{n: n,
		readOps:      desc(metricVolumeReadOps, "Read requests the volume's block device completed (after merging)."),
		writeOps:     desc(metricVolumeWriteOps, "Write requests the volume's block device completed (after merging)."),
		readBytes:    desc(metricVolumeReadBytes, "Bytes read from the volume's block device."),
		writeBytes:   desc(metricVolumeWriteBytes, "Bytes written to the volume's block device."),
		readSeconds:  desc(metricVolumeReadSeconds, "Summed time of the completed read requests of the volume's block device, from issue to completion."),
		writeSeconds: desc(metricVolumeWriteSeconds, "Summed time of the completed write requests of the volume's block device, from issue to completion."),
		inFlight:     desc(metricVolumeQueueLength, "Requests issued to the volume's block device and not completed yet."),
		exceededIOPS: desc(metricVolumeExceededIOPS,
			"Time the volume had I/O held at its provisioned IOPS (fakecloud FUSE volumes whose mount this node sees)."),
		exceededThroughput: desc(metricVolumeExceededThroughput,
			"Time the volume had I/O held at its provisioned throughput (fakecloud FUSE volumes whose mount this node sees)."),
	}
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.readOps, c.writeOps, c.readBytes, c.writeBytes, c.readSeconds, c.writeSeconds, c.inFlight,
		c.exceededIOPS, c.exceededThroughput} {
		ch <- d
	}
}

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	vols, err := c.n.state.staged(c.n.boot)
	if err != nil {
		klog.ErrorS(err, "Listing the staged volumes for their metrics failed")
	}
	for _, v := range vols {
		st, rdev, ok, err := c.n.volumeBlockStat(v.volumeID)
		if err != nil {
			klog.V(2).InfoS("Reading the volume's block statistics failed", "volume", v.volumeID, "err", err)
		}
		if !ok {
			continue
		}
		labels := []string{v.volumeID, v.pvcNamespace, v.pvcName}
		counter := func(d *prometheus.Desc, value float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, value, labels...)
		}
		counter(c.readOps, float64(st.ReadIOs))
		counter(c.writeOps, float64(st.WriteIOs))
		counter(c.readBytes, float64(st.ReadBytes))
		counter(c.writeBytes, float64(st.WriteBytes))
		counter(c.readSeconds, st.ReadTime.Seconds())
		counter(c.writeSeconds, st.WriteTime.Seconds())
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.InFlight), labels...)
		if iops, tput, ok := c.n.volumeExceeded(rdev); ok {
			counter(c.exceededIOPS, iops.Seconds())
			counter(c.exceededThroughput, tput.Seconds())
		}
	}
}

// volumeBlockStat reads the statistics of the volume's device (numbered rdev), found as every other call finds
// it; ok is false when the volume has no device on the node now (detached under a staging kubelet has not
// undone yet).
func (n *NodeServer) volumeBlockStat(volumeID string) (st blockstat.Stat, rdev uint64, ok bool, err error) {
	dev, err := n.devices.Lookup(volumeID)
	if err != nil || dev == "" {
		return st, 0, false, err
	}
	rdev, isBlock, err := n.host.blockDevice(dev)
	if err != nil || !isBlock {
		return st, 0, false, err
	}
	raw, err := n.sys.attr(rdev, "stat")
	if err != nil {
		return st, 0, false, err
	}
	st, err = blockstat.Parse(raw)
	return st, rdev, err == nil, err
}

// fakecloud's FUSE backend serves, beside each volume's file on its mount, a report file ".<file>.report" of
// "key nanoseconds" lines (package fakecloud/iolimits) with the time the volume was held at its limits.
const (
	reportExceededIOPS       = "exceeded_iops_ns"
	reportExceededThroughput = "exceeded_throughput_ns"
	maxReportSize            = 4096
)

// volumeExceeded reads the exceeded times of the loop device numbered rdev from the report file beside its
// backing file; ok is false for any other device, and where this node does not see the mount the backing file
// is on (fakecloud in another mount namespace, on another node): then there is nothing to report, rather than
// a made-up zero.
func (n *NodeServer) volumeExceeded(rdev uint64) (iops, tput time.Duration, ok bool) {
	name, err := n.sys.kernelName(rdev)
	if err != nil || !isLoopName(name) {
		return 0, 0, false
	}
	d, bound, err := n.sys.block.Read(name)
	if err != nil || !bound || !d.Live() {
		return 0, 0, false
	}
	f, err := os.Open(filepath.Join(filepath.Dir(d.Backing), "."+filepath.Base(d.Backing)+".report"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxReportSize))
	if err != nil {
		return 0, 0, false
	}
	values := map[string]time.Duration{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), " ")
		if ns, err := strconv.ParseInt(v, 10, 64); found && err == nil && ns >= 0 {
			values[k] = time.Duration(ns)
		}
	}
	iops, okIOPS := values[reportExceededIOPS]
	tput, okTput := values[reportExceededThroughput]
	return iops, tput, okIOPS && okTput
}
