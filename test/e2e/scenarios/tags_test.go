//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// scenarioTags: scenario 1's cloud volume carries the tag its class's template made of the claim's name; a
// VolumeAttributesClass then sets a tag naming the PV (the resizer's --extra-modify-metadata) and deletes the
// claim's tag, through the resizer's ControllerModifyVolume, with CreateTags and DeleteTags and no ModifyVolume.
func scenarioTags(t *testing.T, r *run) {
	d := r.data
	if d == nil {
		t.Skip("needs scenario 1's volume (S1 failed or was not run)")
	}
	ctx := t.Context()
	claimTag := r.ns + "/" + d.claim
	var modifies float64
	if r.cloud != nil {
		v := r.requireCloudVolume(t, d.volumeID, d.node.Zone, d.node.InstanceID)
		if got := v.tag("claim"); got != claimTag {
			t.Fatalf("volume %s: tag claim = %q, want %q (the class's template); tags %v", d.volumeID, got, claimTag, v.Tags)
		}
		var err error
		if modifies, err = r.cloud.requestCount(ctx, "ModifyVolume", "Success"); err != nil {
			t.Fatal(err)
		}
	}

	vac := &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: classTags, Labels: map[string]string{runLabel: r.ns}},
		DriverName: driverName,
		Parameters: map[string]string{"tagSpecification_1": "pv={{ .PVName }}", "tagDeletion_1": "claim"},
	}
	err := r.cs.StorageV1().VolumeAttributesClasses().Delete(ctx, classTags, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete VolumeAttributesClass %s left by an earlier run: %v", classTags, err)
	}
	if _, err := r.cs.StorageV1().VolumeAttributesClasses().Create(ctx, vac, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeAttributesClass: %v", err)
	}
	patch := fmt.Sprintf(`{"spec":{"volumeAttributesClassName":%q}}`, classTags)
	if _, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Patch(ctx, d.claim, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch PVC %s to class %s: %v", d.claim, classTags, err)
	}
	waitFor(t, "PVC "+d.claim+" in VolumeAttributesClass "+classTags, func(ctx context.Context) (bool, string, error) {
		c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, d.claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		current := ""
		if c.Status.CurrentVolumeAttributesClassName != nil {
			current = *c.Status.CurrentVolumeAttributesClassName
		}
		status := fmt.Sprintf("current class %q", current)
		if m := c.Status.ModifyVolumeStatus; m != nil {
			status += fmt.Sprintf(", modifying to %q: %s", m.TargetVolumeAttributesClassName, m.Status)
		}
		return current == classTags, status, nil
	})
	if r.cloud == nil {
		return
	}
	v, ok, err := r.cloud.volume(ctx, d.volumeID)
	if err != nil || !ok {
		t.Fatalf("volume %s: found %v, %v", d.volumeID, ok, err)
	}
	if got := v.tag("pv"); got != d.pv {
		t.Errorf("volume %s: tag pv = %q, want %q; tags %v", d.volumeID, got, d.pv, v.Tags)
	}
	if got := v.tag("claim"); got != "" {
		t.Errorf("volume %s: tag claim = %q, want it deleted; tags %v", d.volumeID, got, v.Tags)
	}
	after, err := r.cloud.requestCount(ctx, "ModifyVolume", "Success")
	if err != nil {
		t.Fatal(err)
	}
	if after != modifies {
		t.Errorf("the tag change made %v ModifyVolume calls; it needs none", after-modifies)
	}
	t.Logf("volume %s: tag pv=%s set and claim deleted through VolumeAttributesClass %s", d.volumeID, d.pv, classTags)
}
