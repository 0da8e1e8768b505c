//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node metrics the scenario reads (docs/driver.md).
const (
	metricNodeWriteBytes = "diskforge_node_volume_write_bytes_total"
	metricNodeWriteOps   = "diskforge_node_volume_write_ops_total"
	metricNodeReadBytes  = "diskforge_node_volume_read_bytes_total"
)

// scenarioNodeMetrics: a pod writes and reads its ext4 volume with direct I/O, and the node plugin's /metrics
// (scraped through the API server's pod proxy, on the driver container's "metrics" port) reports the volume's
// writes and reads grown by at least what the pod did, on the series labelled with the volume ID and the
// claim's namespace and name.
func scenarioNodeMetrics(t *testing.T, r *run) {
	if len(r.nodes) == 0 {
		t.Fatal("no node")
	}
	n := r.nodes[0]
	const claim, size = "metrics", 1 * gib
	r.createPVC(t, pvc(claim, r.ns, classExt4, size, false, ""))
	p := r.createPod(t, "metrics", claim, n, false)
	_, pv := r.waitPVCBound(t, claim)
	volumeID := pv.Spec.CSI.VolumeHandle
	labels := map[string]string{"volume_id": volumeID, "namespace": r.ns, "persistentvolumeclaim": claim}

	var before map[string]float64
	waitFor(t, "node metrics of volume "+volumeID, func(ctx context.Context) (bool, string, error) {
		got, err := r.nodeVolumeMetrics(ctx, n.Name, labels)
		if err != nil {
			return false, "", err
		}
		before = got
		return len(got) == 3, fmt.Sprintf("%v", got), nil
	})

	const mib = 1 << 20
	const written, read = 8 * mib, 4 * mib
	r.mustExec(t, p.Name, nil, "sh", "-c", fmt.Sprintf(
		"dd if=/dev/urandom of=%[1]s/metrics bs=1M count=%[2]d oflag=direct conv=fsync 2>/dev/null && "+
			"dd if=%[1]s/metrics of=/dev/null bs=1M count=%[3]d iflag=direct 2>/dev/null", dataDir, written/mib, read/mib))

	waitFor(t, "volume "+volumeID+"'s node metrics grown by the pod's I/O", func(ctx context.Context) (bool, string, error) {
		got, err := r.nodeVolumeMetrics(ctx, n.Name, labels)
		if err != nil {
			return false, "", err
		}
		status := fmt.Sprintf("before %v, now %v", before, got)
		return got[metricNodeWriteBytes]-before[metricNodeWriteBytes] >= written &&
			got[metricNodeWriteOps] > before[metricNodeWriteOps] &&
			got[metricNodeReadBytes]-before[metricNodeReadBytes] >= read, status, nil
	})

	r.deletePod(t, p.Name)
	err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Delete(t.Context(), claim, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete PVC %s: %v", claim, err)
	}
}

// nodeVolumeMetrics scrapes the node plugin on nodeName through the API server's pod proxy and returns the
// values of the scenario's series whose labels include all of labels.
func (r *run) nodeVolumeMetrics(ctx context.Context, nodeName string, labels map[string]string) (map[string]float64, error) {
	list, err := r.cs.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: nodePluginSelector,
		FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no node plugin pod on %s", nodeName)
	}
	p := list.Items[0]
	port := ""
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if c.Name == nodePluginContainer && cp.Name == "metrics" {
				port = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	if port == "" {
		return nil, permanent("node plugin pod %s has no metrics port", p.Name)
	}
	raw, err := r.cs.CoreV1().Pods(driverNamespace).ProxyGet("http", p.Name, port, "/metrics", nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", p.Name, err)
	}
	return seriesWith(string(raw), labels, metricNodeWriteBytes, metricNodeWriteOps, metricNodeReadBytes), nil
}

// seriesWith reads the Prometheus text format: the value of each named metric's series carrying all of labels
// (label values without quotes, commas or escapes: volume IDs and Kubernetes names).
func seriesWith(text string, labels map[string]string, names ...string) map[string]float64 {
	got := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		want := false
		for _, n := range names {
			want = want || n == name
		}
		for k, v := range labels {
			want = want && strings.Contains(","+set+",", fmt.Sprintf(",%s=%q,", k, v))
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); want && err == nil {
			got[name] = f
		}
	}
	return got
}
