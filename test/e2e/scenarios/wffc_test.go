//go:build e2e

package scenarios

import (
	"fmt"
	"testing"
	"time"
)

// scenarioWFFCZoneB: a WaitForFirstConsumer xfs claim whose first pod is pinned to the zone-b node is provisioned in
// zone b, attached to that node, staged and published there, and a pod writes data into it.
func scenarioWFFCZoneB(t *testing.T, r *run) {
	r.needZones(t, 0, true)
	n := *r.nodeB
	const claim, podName = "data", "data-b"
	r.createPVC(t, pvc(claim, r.ns, classXFS, 2*gib, false, ""))
	p := r.createPod(t, podName, claim, n, false)

	c, pv := r.waitPVCBound(t, claim)
	if got := c.Annotations[selectedNodeAnnotation]; got != n.Name {
		t.Errorf("PVC %s: %s = %q, want %q (the scheduler's choice)", claim, selectedNodeAnnotation, got, n.Name)
	}
	requirePV(t, pv, n.Zone, "xfs", false)
	va := r.waitAttached(t, pv.Name, n.Name)
	t.Logf("VolumeAttachment %s: attached, metadata %v", va.Name, va.Status.AttachmentMetadata)
	v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
	t.Logf("pod %s runs on %s (%s)", p.Name, p.Spec.NodeName, n.Zone)

	pv1 := &podVolume{claim: claim, pv: pv.Name, volumeID: pv.Spec.CSI.VolumeHandle, pod: p, node: n, fsType: "xfs"}
	if r.host {
		pv1.mount = r.requirePodMount(t, n, p.UID, pv.Name, "xfs", v)
	}
	d := r.writeData(t, p.Name, dataDir, fmt.Sprintf("diskforge e2e %s %s %s", r.ns, claim, time.Now().Format(time.RFC3339Nano)))
	pv1.data = &d
	r.data = pv1
}
