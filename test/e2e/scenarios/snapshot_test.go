//go:build e2e

package scenarios

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scenarioSnapshotRestore: a VolumeSnapshot of scenario 1's claim becomes ready (a completed cloud snapshot of its
// volume); a claim restored from it, used by a pod in zone a (snapshots are regional), is a new volume made from
// that snapshot in zone a, holding the data scenario 1 wrote.
func scenarioSnapshotRestore(t *testing.T, r *run) {
	d := r.data
	if d == nil {
		t.Skip("needs scenario 1's volume (S1 failed or was not run)")
	}
	if r.noSnapshots != "" {
		t.Fatal(r.noSnapshots)
	}
	const snapName, claim = "data-snap", "restored"
	_, err := r.dyn.Resource(volumeSnapshots).Namespace(r.ns).Create(t.Context(),
		volumeSnapshot(snapName, r.ns, classSnapshots, d.claim), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeSnapshot %s: %v", snapName, err)
	}
	vs := r.waitSnapshotReady(t, snapName)
	content, err := r.snapshotContentOf(t.Context(), vs)
	if err != nil {
		t.Fatal(err)
	}
	handle, _, _ := unstructured.NestedString(content.Object, "status", "snapshotHandle")
	if handle == "" {
		t.Fatalf("VolumeSnapshotContent %s has no snapshot handle", content.GetName())
	}
	sizeText, _, _ := unstructured.NestedString(vs.Object, "status", "restoreSize")
	restoreSize, err := resource.ParseQuantity(sizeText)
	if err != nil {
		t.Fatalf("VolumeSnapshot %s restoreSize %q: %v", snapName, sizeText, err)
	}
	t.Logf("snapshot %s of %s (content %s), restore size %s", handle, d.volumeID, content.GetName(), sizeText)
	if r.cloud != nil {
		waitFor(t, "cloud snapshot "+handle+" completed", func(ctx context.Context) (bool, string, error) {
			snaps, err := r.cloud.snapshotsTagged(ctx, tagSnapshotNamespace, r.ns)
			if err != nil {
				return false, "", err
			}
			i := slices.IndexFunc(snaps, func(s cloudSnapshot) bool { return s.ID == handle })
			if i < 0 {
				return false, "no snapshot tagged with the namespace", nil
			}
			if snaps[i].VolumeID != d.volumeID {
				return false, "", permanent("snapshot %s is of %s, want %s", handle, snaps[i].VolumeID, d.volumeID)
			}
			return snaps[i].Status == "completed", "status " + snaps[i].Status, nil
		})
	}

	// Restore in another zone than the source's when the cluster has one: a snapshot is not bound to a zone.
	n := d.node
	if len(r.nodesA) > 0 && r.nodesA[0].Zone != d.node.Zone {
		n = r.nodesA[0]
	}
	r.createPVC(t, pvc(claim, r.ns, classXFS, restoreSize.Value(), false, snapName))
	p := r.createPod(t, claim, claim, n, false)
	_, pv := r.waitPVCBound(t, claim)
	requirePV(t, pv, n.Zone, "xfs", false)
	r.waitAttached(t, pv.Name, n.Name)
	v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
	if r.cloud != nil && v.SnapshotID != handle {
		t.Fatalf("restored volume %s was made from snapshot %q, want %s", v.ID, v.SnapshotID, handle)
	}
	if r.host {
		r.requirePodMount(t, n, p.UID, pv.Name, "xfs", v)
	}
	if d.data != nil {
		d.data.verifyIn(t, r, p.Name, dataDir)
	}
}
