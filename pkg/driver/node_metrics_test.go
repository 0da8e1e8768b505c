package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud/iolimits"
)

// ioStat is what a fake device's stat file says: requests, 512-byte sectors and milliseconds of each direction,
// and the requests in flight.
type ioStat struct{ reads, readSectors, readMs, writes, writeSectors, writeMs, inFlight int }

// setStat writes the device's stat file as a 5.5+ kernel shows it (17 fields).
func (m *fakeMachine) setStat(d *fakeDevice, s ioStat) {
	m.t.Helper()
	line := fmt.Sprintf("%8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d %8d\n",
		s.reads, 3, s.readSectors, s.readMs, s.writes, 5, s.writeSectors, s.writeMs, s.inFlight, 40, 90, 0, 0, 0, 0, 7, 2)
	must(m.t, os.WriteFile(filepath.Join(m.sys.devBlock, devID(d.rdev), "stat"), []byte(line), 0o644))
}

// scrape gathers the node's volume metrics in the text format, only the series named.
func scrape(t *testing.T, n *NodeServer, names ...string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	must(t, reg.Register(n.Collector()))
	families, err := reg.Gather()
	must(t, err)
	var b strings.Builder
	for _, f := range families {
		for _, name := range names {
			if f.GetName() == name {
				for _, m := range f.GetMetric() {
					var labels []string
					for _, l := range m.GetLabel() {
						labels = append(labels, l.GetName()+"="+l.GetValue())
					}
					v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
					fmt.Fprintf(&b, "%s{%s} %g\n", name, strings.Join(labels, ","), v)
				}
			}
		}
	}
	return b.String()
}

func TestVolumeMetrics(t *testing.T) {
	m := newFakeMachine(t)
	e := newFakeEnv(t, m)
	const (
		idA = "vol-0000000000000000a" // filesystem, provisioned for a claim
		idB = "vol-0000000000000000b" // block, no claim in its volume context
		idC = "vol-0000000000000000c" // attached, never staged
		idN = "vol-0000000000000000d" // NVMe, staged, then unstaged
	)
	loopA, loopB, loopC := m.loopVolume(idA, 1, gib), m.loopVolume(idB, 2, gib), m.loopVolume(idC, 3, gib)
	nvme := m.nvmeVolume(idN, 1, gib)
	for _, d := range []*fakeDevice{loopA, loopB, loopC, nvme} {
		m.setStat(d, ioStat{})
	}
	stA, stB, stN := e.path("stA"), e.path("stB"), e.path("stN")
	for _, d := range []string{stA, stB, stN} {
		must(t, os.Mkdir(d, 0o750))
	}

	if got := scrape(t, e.node, metricVolumeReadOps); got != "" {
		t.Errorf("before any stage, series:\n%s", got)
	}
	e.mustStage(idA, stA, mountCap("ext4", rwo), map[string]string{ContextPVCNamespace: "shop", ContextPVCName: "data-db-0"})
	e.mustStage(idB, stB, blockCap(rwo), nil)
	e.mustStage(idN, stN, mountCap("xfs", rwo), map[string]string{ContextPVCNamespace: "shop", ContextPVCName: "logs"})
	e.mustUnstage(idN, stN)

	m.setStat(loopA, ioStat{reads: 10, readSectors: 80, readMs: 1500, writes: 4, writeSectors: 2048, writeMs: 250, inFlight: 3})
	m.setStat(loopC, ioStat{reads: 99, writes: 99})
	m.setStat(nvme, ioStat{reads: 99, writes: 99})

	// Series come sorted by their labels: b's empty namespace first.
	a := "namespace=shop,persistentvolumeclaim=data-db-0,volume_id=" + idA
	b := "namespace=,persistentvolumeclaim=,volume_id=" + idB
	tests := []struct {
		metric string
		want   string
	}{
		{metricVolumeReadOps, metricVolumeReadOps + "{" + b + "} 0\n" + metricVolumeReadOps + "{" + a + "} 10\n"},
		{metricVolumeWriteOps, metricVolumeWriteOps + "{" + b + "} 0\n" + metricVolumeWriteOps + "{" + a + "} 4\n"},
		{metricVolumeReadBytes, metricVolumeReadBytes + "{" + b + "} 0\n" + metricVolumeReadBytes + "{" + a + "} 40960\n"},
		{metricVolumeWriteBytes, metricVolumeWriteBytes + "{" + b + "} 0\n" + metricVolumeWriteBytes + "{" + a + "} 1.048576e+06\n"},
		{metricVolumeReadSeconds, metricVolumeReadSeconds + "{" + b + "} 0\n" + metricVolumeReadSeconds + "{" + a + "} 1.5\n"},
		{metricVolumeWriteSeconds, metricVolumeWriteSeconds + "{" + b + "} 0\n" + metricVolumeWriteSeconds + "{" + a + "} 0.25\n"},
		{metricVolumeQueueLength, metricVolumeQueueLength + "{" + b + "} 0\n" + metricVolumeQueueLength + "{" + a + "} 3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.metric, func(t *testing.T) {
			if got := scrape(t, e.node, tt.metric); got != tt.want {
				t.Errorf("scrape:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}

	t.Run("values move with the stat file", func(t *testing.T) {
		m.setStat(loopA, ioStat{reads: 11, readSectors: 88, readMs: 1500, writes: 4, writeSectors: 2048, writeMs: 250})
		want := metricVolumeReadOps + "{" + b + "} 0\n" + metricVolumeReadOps + "{" + a + "} 11\n"
		if got := scrape(t, e.node, metricVolumeReadOps); got != want {
			t.Errorf("scrape:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("exceeded times where the node sees fakecloud's mount", func(t *testing.T) {
		mount := t.TempDir()
		must(t, os.WriteFile(filepath.Join(m.sys.block.Root, loopA.name, "loop", "backing_file"), []byte(mount+"/"+idA+".img\n"), 0o644))
		for metric, none := range map[string]string{metricVolumeExceededIOPS: "", metricVolumeExceededThroughput: ""} {
			if got := scrape(t, e.node, metric); got != none {
				t.Errorf("without a report file, series:\n%s", got)
			}
		}
		must(t, os.WriteFile(filepath.Join(mount, "."+idA+".img.report"),
			[]byte("exceeded_iops_ns 00000000001500000000\nexceeded_throughput_ns 00000000000000000250\n"), 0o444))
		for metric, want := range map[string]string{metricVolumeExceededIOPS: "1.5", metricVolumeExceededThroughput: "2.5e-07"} {
			if got, want := scrape(t, e.node, metric), metric+"{"+a+"} "+want+"\n"; got != want {
				t.Errorf("scrape:\n%s\nwant:\n%s", got, want)
			}
		}
	})
	t.Run("a restarted plugin reports the same volumes", func(t *testing.T) {
		restarted, err := NewNodeServer(e.node.opts)
		must(t, err)
		want := metricVolumeReadOps + "{" + b + "} 0\n" + metricVolumeReadOps + "{" + a + "} 11\n"
		if got := scrape(t, restarted, metricVolumeReadOps); got != want {
			t.Errorf("scrape:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("another boot's records are void", func(t *testing.T) {
		m.boot = "boot-2"
		defer func() { m.boot = "boot-1" }()
		rebooted, err := NewNodeServer(e.node.opts)
		must(t, err)
		if got := scrape(t, rebooted, metricVolumeReadOps); got != "" {
			t.Errorf("after a reboot, series:\n%s", got)
		}
	})
	t.Run("a detached volume is not reported", func(t *testing.T) {
		must(t, os.Remove(filepath.Join(m.sys.block.Root, loopB.name, "loop", "backing_file")))
		want := metricVolumeReadOps + "{" + a + "} 11\n"
		if got := scrape(t, e.node, metricVolumeReadOps); got != want {
			t.Errorf("scrape:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("lint", func(t *testing.T) {
		problems, err := testutil.CollectAndLint(e.node.Collector())
		must(t, err)
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	})
}

// TestVolumeMetricsOnLoopDevice: direct writes and reads of a real loop device, staged as a block volume,
// move its series by what they moved.
func TestVolumeMetricsOnLoopDevice(t *testing.T) {
	e := newNodeEnv(t, NodeOptions{})
	id, dev := e.volume(16*mib, nil)
	staging := e.path("staging")
	must(t, os.Mkdir(staging, 0o750))
	e.mustStage(id, staging, blockCap(rwo), map[string]string{ContextPVCNamespace: "ns", ContextPVCName: "claim"})
	t.Cleanup(func() { e.mustUnstage(id, staging) })
	labels := "namespace=ns,persistentvolumeclaim=claim,volume_id=" + id
	value := func(metric string) float64 {
		t.Helper()
		for _, line := range strings.Split(scrape(t, e.node, metric), "\n") {
			if rest, ok := strings.CutPrefix(line, metric+"{"+labels+"} "); ok {
				var v float64
				_, err := fmt.Sscan(rest, &v)
				must(t, err)
				return v
			}
		}
		t.Fatalf("no %s series of %s", metric, id)
		return 0
	}
	writes, written, reads, read := value(metricVolumeWriteOps), value(metricVolumeWriteBytes), value(metricVolumeReadOps), value(metricVolumeReadBytes)

	const n = 1 << 20
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	must(t, err)
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned for O_DIRECT
	must(t, err)
	defer func() { _ = unix.Munmap(buf) }()
	buf[0] = 1
	_, err = f.WriteAt(buf, 0)
	must(t, err)
	_, err = f.ReadAt(buf, 2*n)
	must(t, err)

	if got := value(metricVolumeWriteBytes) - written; got < n {
		t.Errorf("write bytes grew by %v, want at least %d", got, n)
	}
	if got := value(metricVolumeWriteOps) - writes; got < 1 {
		t.Errorf("write ops grew by %v", got)
	}
	if got := value(metricVolumeReadBytes) - read; got < n {
		t.Errorf("read bytes grew by %v, want at least %d", got, n)
	}
	if got := value(metricVolumeReadOps) - reads; got < 1 {
		t.Errorf("read ops grew by %v", got)
	}
}

// TestVolumeExceededOnFuse: a volume of fakecloud's fuse backend held at 100 IOPS reports, through the report
// file beside its loop device's backing file (the node and the backend share this process's mounts), the time
// it was held; a volume on a plain loop device reports none (TestVolumeMetricsOnLoopDevice's have none either).
func TestVolumeExceededOnFuse(t *testing.T) {
	limits := iolimits.New(iolimits.Options{Lookup: func(string) (iolimits.Spec, bool) {
		return iolimits.Spec{Type: "io2", SizeGiB: 4, Iops: 100}, true
	}})
	e := newFuseNodeEnv(t, limits)
	id, dev := e.volume(16*mib, nil)
	staging := e.path("staging")
	must(t, os.Mkdir(staging, 0o750))
	e.mustStage(id, staging, blockCap(rwo), nil)
	t.Cleanup(func() { e.mustUnstage(id, staging) })

	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	must(t, err)
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	must(t, err)
	defer func() { _ = unix.Munmap(buf) }()
	// A second's worth of reads comes out of the full bucket; the next ones are held.
	for i := range 130 {
		_, err := f.ReadAt(buf, int64(i)*4096)
		must(t, err)
	}
	st, ok := limits.Stats(id)
	if !ok || st.ExceededIOPS == 0 {
		t.Fatalf("the policy held nothing: %+v", st)
	}
	labels := "namespace=,persistentvolumeclaim=,volume_id=" + id
	got := scrape(t, e.node, metricVolumeExceededIOPS, metricVolumeExceededThroughput)
	var iops, tput float64
	if _, err := fmt.Sscanf(got, metricVolumeExceededIOPS+"{"+labels+"} %g\n"+metricVolumeExceededThroughput+"{"+labels+"} %g\n", &iops, &tput); err != nil {
		t.Fatalf("scrape:\n%s: %v", got, err)
	}
	// Read after the policy's stats: the series can only have grown since.
	if iops < st.ExceededIOPS.Seconds() || tput != 0 {
		t.Errorf("exceeded IOPS %gs, throughput %gs; the policy held the volume %v at its IOPS, never at its throughput", iops, tput, st.ExceededIOPS)
	}
}
