//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The IOPS scenario's limits: far apart, and both below the few thousand 4 KiB reads a second at queue depth 1
// that the local cluster's FUSE-backed devices manage on a small machine, so each is what the pod measures.
const (
	iopsBefore = 100
	iopsAfter  = 1000
)

// scenarioProvisionedIOPS: a pod on an io2 block volume provisioned at 100 IOPS measures about that with dd
// (4 KiB direct reads, queue depth 1); a VolumeAttributesClass of 1,000 IOPS modifies the volume, and the pod
// then measures clearly more, and no more than the new limit. Each measurement first reads a second and a half
// of the rate untimed, so that the one-second burst the cloud allows is spent.
func scenarioProvisionedIOPS(t *testing.T, r *run) {
	if len(r.nodes) == 0 {
		t.Fatal("no node")
	}
	n := r.nodes[0]
	if len(r.nodesA) > 0 {
		n = r.nodesA[0]
	}
	ctx := t.Context()
	sc := storageClass(classIOPS, r.ns, "ext4")
	sc.Parameters["type"], sc.Parameters["iops"] = "io2", strconv.Itoa(iopsBefore)
	r.replaceStorageClass(t, sc)
	const claim, size = "iops", 4 * gib
	r.createPVC(t, pvc(claim, r.ns, classIOPS, size, true, ""))
	p := r.createPod(t, "iops", claim, n, true)
	_, pv := r.waitPVCBound(t, claim)
	r.waitAttached(t, pv.Name, n.Name)
	if r.cloud != nil {
		v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
		if v.Type != "io2" || v.Iops != iopsBefore {
			t.Fatalf("cloud volume %s is %s at %d IOPS, want io2 at %d", v.ID, v.Type, v.Iops, iopsBefore)
		}
	}

	before := r.measureIOPS(t, p.Name, iopsBefore)
	t.Logf("io2 at %d IOPS: the pod measured %.0f IOPS", iopsBefore, before)
	if before < 0.7*iopsBefore || before > 1.3*iopsBefore {
		t.Fatalf("the pod measured %.0f IOPS on a volume provisioned at %d", before, iopsBefore)
	}

	vac := &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: classIOPS, Labels: map[string]string{runLabel: r.ns}},
		DriverName: driverName,
		Parameters: map[string]string{"iops": strconv.Itoa(iopsAfter)},
	}
	err := r.cs.StorageV1().VolumeAttributesClasses().Delete(ctx, classIOPS, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete VolumeAttributesClass %s left by an earlier run: %v", classIOPS, err)
	}
	if _, err := r.cs.StorageV1().VolumeAttributesClasses().Create(ctx, vac, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeAttributesClass: %v", err)
	}
	patch := fmt.Sprintf(`{"spec":{"volumeAttributesClassName":%q}}`, classIOPS)
	if _, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Patch(ctx, claim, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch PVC %s to class %s: %v", claim, classIOPS, err)
	}
	// The driver answers once the modification is optimizing, from when the cloud enforces the target.
	waitFor(t, "PVC "+claim+" in VolumeAttributesClass "+classIOPS, func(ctx context.Context) (bool, string, error) {
		c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		current := ""
		if c.Status.CurrentVolumeAttributesClassName != nil {
			current = *c.Status.CurrentVolumeAttributesClassName
		}
		return current == classIOPS, fmt.Sprintf("current class %q", current), nil
	})
	if r.cloud != nil {
		if v, ok, err := r.cloud.volume(ctx, pv.Spec.CSI.VolumeHandle); err != nil || !ok || v.Iops != iopsAfter {
			t.Fatalf("cloud volume %s after the modification: %+v (found %v, %v), want %d IOPS", pv.Spec.CSI.VolumeHandle, v, ok, err, iopsAfter)
		}
	}

	after := r.measureIOPS(t, p.Name, iopsAfter)
	t.Logf("io2 modified to %d IOPS: the pod measured %.0f IOPS (before: %.0f)", iopsAfter, after, before)
	if after > 1.3*iopsAfter {
		t.Fatalf("the pod measured %.0f IOPS on a volume provisioned at %d", after, iopsAfter)
	}
	if after < 3*before {
		t.Fatalf("after the modification to %d IOPS the pod measured %.0f IOPS, before %.0f: not clearly more", iopsAfter, after, before)
	}
}

// measureIOPS has the pod read its block device with dd, 4 KiB direct reads one at a time: a second and a
// half's worth at limit untimed (the burst), then five seconds' worth timed by /proc/uptime (10 ms ticks).
func (r *run) measureIOPS(t testing.TB, pod string, limit int) float64 {
	t.Helper()
	warm, n := limit*3/2, limit*5
	script := fmt.Sprintf(`dd if=%[1]s of=/dev/null bs=4k count=%[2]d iflag=direct 2>/dev/null &&
a=$(cut -d' ' -f1 /proc/uptime) &&
dd if=%[1]s of=/dev/null bs=4k count=%[3]d skip=%[2]d iflag=direct 2>/dev/null &&
b=$(cut -d' ' -f1 /proc/uptime) && echo "$a $b"`, blockDevicePath, warm, n)
	out := strings.Fields(r.mustExec(t, pod, nil, "sh", "-c", script))
	if len(out) != 2 {
		t.Fatalf("pod %s: timing %q", pod, out)
	}
	a, err1 := strconv.ParseFloat(out[0], 64)
	b, err2 := strconv.ParseFloat(out[1], 64)
	if err1 != nil || err2 != nil || b <= a {
		t.Fatalf("pod %s: timing %q", pod, out)
	}
	t.Logf("pod %s: %d 4 KiB direct reads in %.2fs", pod, n, b-a)
	return float64(n) / (b - a)
}
