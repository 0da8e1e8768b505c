//go:build e2e

package scenarios

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// instanceTypeLabel is the well-known Node label of the instance type, which the node plugin reads.
const instanceTypeLabel = "node.kubernetes.io/instance-type"

// scenarioVolumeLimits: every node plugin, with no cloud endpoint or credentials, reports in CSINode the volume
// limit of its Node's instance type from the table fakecloud enforces (an unlabelled node: the default type's).
func scenarioVolumeLimits(t *testing.T, r *run) {
	for _, n := range r.nodes {
		node, err := r.cs.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		typ := node.Labels[instanceTypeLabel]
		info, ok := instancetypes.Lookup(typ)
		if !ok {
			info, _ = instancetypes.Lookup(instancetypes.Default)
		}
		count, ok, err := r.volumeLimit(t.Context(), n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || count != info.VolumeLimit() {
			t.Errorf("node %s (%q): CSINode allocatable count %d (reported: %v), want %d (%s)", n.Name, typ, count, ok,
				info.VolumeLimit(), info.Name)
			continue
		}
		t.Logf("node %s (%s): %d volumes, as its instance type allows", n.Name, info.Name, count)
	}
}

// volumeLimit is the driver's allocatable volume count in the node's CSINode, the limit the scheduler keeps to;
// ok is false if the driver reports none there.
func (r *run) volumeLimit(ctx context.Context, nodeName string) (count int, ok bool, err error) {
	csiNode, err := r.cs.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return 0, false, err
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == driverName && d.Allocatable != nil && d.Allocatable.Count != nil {
			return int(*d.Allocatable.Count), true, nil
		}
	}
	return 0, false, nil
}
