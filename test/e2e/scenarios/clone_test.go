//go:build e2e

package scenarios

import (
	"testing"
)

// scenarioClone: a claim cloned from scenario 1's claim (its data source is that PVC) is a new cloud volume copied
// from scenario 1's, in its zone, and a second pod there reads scenario 1's data back from it.
func scenarioClone(t *testing.T, r *run) {
	d := r.data
	if d == nil {
		t.Skip("needs scenario 1's volume (S1 failed or was not run)")
	}
	const claim = "cloned"
	src, _ := r.waitPVCBound(t, d.claim)
	size := src.Status.Capacity.Storage().Value() // the source's current size: it may have grown (S3)
	r.createPVC(t, clonePVC(claim, r.ns, classXFS, size, d.claim))
	n := d.node // a clone lives in its source's zone
	p := r.createPod(t, claim, claim, n, false)
	_, pv := r.waitPVCBound(t, claim)
	requirePV(t, pv, n.Zone, "xfs", false)
	r.waitAttached(t, pv.Name, n.Name)
	v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
	if v.ID == d.volumeID {
		t.Fatalf("the clone is the source volume %s", v.ID)
	}
	if r.cloud != nil && v.SourceVolumeID != d.volumeID {
		t.Fatalf("cloned volume %s was copied from %q, want %s", v.ID, v.SourceVolumeID, d.volumeID)
	}
	if d.data != nil {
		d.data.verifyIn(t, r, p.Name, dataDir)
	}
}
