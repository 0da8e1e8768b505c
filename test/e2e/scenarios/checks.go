//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// selectedNodeAnnotation is where the scheduler tells the provisioner which node a WaitForFirstConsumer claim is for.
const selectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// pvZones collects the zones the PV's node affinity requires, per zone key.
func pvZones(pv *corev1.PersistentVolume) map[string][]string {
	out := map[string][]string{}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return out
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if (e.Key == zoneLabel || e.Key == driverZoneLabel) && e.Operator == corev1.NodeSelectorOpIn {
				out[e.Key] = append(out[e.Key], e.Values...)
			}
		}
	}
	return out
}

// requirePV checks that the PV is the driver's, of the wanted volume mode and (for filesystems) type, and that its
// node affinity confines it to zone.
func requirePV(t testing.TB, pv *corev1.PersistentVolume, zone, fsType string, block bool) {
	t.Helper()
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName || pv.Spec.CSI.VolumeHandle == "" {
		t.Fatalf("PV %s is not the driver's: %+v", pv.Name, pv.Spec.CSI)
	}
	isBlock := pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock
	if isBlock != block {
		t.Fatalf("PV %s volume mode %v, want block=%v", pv.Name, pv.Spec.VolumeMode, block)
	}
	if !block && pv.Spec.CSI.FSType != fsType {
		t.Fatalf("PV %s fsType %q, want %q", pv.Name, pv.Spec.CSI.FSType, fsType)
	}
	zones := pvZones(pv)
	if len(zones) == 0 {
		t.Fatalf("PV %s has no zone in its node affinity: %v", pv.Name, pv.Spec.NodeAffinity)
	}
	for key, values := range zones {
		if slices.ContainsFunc(values, func(v string) bool { return v != zone }) {
			t.Fatalf("PV %s node affinity %s in %v, want only %s", pv.Name, key, values, zone)
		}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Fatalf("PV %s reclaim policy %s, want Delete", pv.Name, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	t.Logf("PV %s: volume %s, zones %v", pv.Name, pv.Spec.CSI.VolumeHandle, zones)
}

// requireCloudVolume waits until fakecloud has the volume in zone, attached to instance (if not empty) and to no
// other instance; it returns the volume. Without cloud checks it does nothing.
func (r *run) requireCloudVolume(t testing.TB, id, zone, instance string) cloudVolume {
	t.Helper()
	r.noteVolume(id)
	if r.cloud == nil {
		return cloudVolume{ID: id}
	}
	var v cloudVolume
	what := fmt.Sprintf("cloud volume %s in %s", id, zone)
	if instance != "" {
		what += ", attached to " + instance + " only"
	}
	waitFor(t, what, func(ctx context.Context) (bool, string, error) {
		var ok bool
		var err error
		v, ok, err = r.cloud.volume(ctx, id)
		if err != nil || !ok {
			return false, "not in /admin/volumes", err
		}
		if v.Zone != zone {
			return false, v.String(), permanent("cloud volume %s is in %s, want %s", id, v.Zone, zone)
		}
		if instance == "" {
			return true, v.String(), nil
		}
		return len(v.Attachments) == 1 && v.Attachments[0].InstanceID == instance &&
			v.Attachments[0].State == "attached", v.String(), nil
	})
	return v
}

// requirePodMount checks, on the host, that kubelet mounted the volume of the pod on n with fsType, that the mount is
// the cloud volume's device, and that the volume is staged on n (a globalmount of the same device).
func (r *run) requirePodMount(t testing.TB, n node, podUID types.UID, pv, fsType string, v cloudVolume) string {
	t.Helper()
	path := podVolumePath(n, podUID, pv)
	m := requireMount(t, n, path, fsType)
	if len(v.Attachments) == 1 && v.Attachments[0].HostDevice != "" {
		want, err := hostDeviceNumber(v.Attachments[0].HostDevice)
		if err != nil {
			t.Fatalf("device of %s: %v", v.Attachments[0].HostDevice, err)
		}
		if m.dev != want {
			t.Fatalf("%s is device %s, but the cloud volume is on %s (%s)", path, m.dev, v.Attachments[0].HostDevice, want)
		}
		t.Logf("the pod's mount is the cloud volume's device %s (%s)", v.Attachments[0].HostDevice, want)
	}
	ms, err := readMounts(n)
	if err != nil {
		t.Fatal(err)
	}
	csiDir := n.RootDir + "/plugins/kubernetes.io/csi/"
	staged := slices.ContainsFunc(ms, func(s mountEntry) bool {
		return strings.HasPrefix(s.point, csiDir) && strings.HasSuffix(s.point, "/globalmount") && s.dev == m.dev
	})
	if !staged {
		t.Fatalf("device %s is mounted at %s but not staged below %s", m.dev, path, csiDir)
	}
	t.Logf("staged: a globalmount of %s below %s", m.dev, csiDir)
	return path
}

// resizePVC asks for a new size, as `kubectl patch pvc` does.
func (r *run) resizePVC(t testing.TB, claim string, size int64) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`,
		resource.NewQuantity(size, resource.BinarySI).String())
	_, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Patch(t.Context(), claim, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch PVC %s to %d bytes: %v", claim, size, err)
	}
	t.Logf("PVC %s: requested %s", claim, resource.NewQuantity(size, resource.BinarySI))
}

// waitPVGrown waits for the PV's capacity, and for the cloud volume's size, to reach size.
func (r *run) waitPVGrown(t testing.TB, pv, volumeID string, size int64) {
	t.Helper()
	waitFor(t, "PV "+pv+" capacity grown", func(ctx context.Context) (bool, string, error) {
		p, err := r.cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got := p.Spec.Capacity.Storage()
		return got.Value() >= size, "capacity " + got.String(), nil
	})
	if r.cloud != nil {
		waitFor(t, "cloud volume "+volumeID+" grown", func(ctx context.Context) (bool, string, error) {
			v, ok, err := r.cloud.volume(ctx, volumeID)
			if err != nil || !ok {
				return false, "not in /admin/volumes", err
			}
			return int64(v.SizeGiB)*gib >= size, v.String(), nil
		})
	}
}

// waitPVCCapacity waits for the claim's status capacity to reach size, which kubelet reports once the filesystem grew.
func (r *run) waitPVCCapacity(t testing.TB, claim string, size int64) {
	t.Helper()
	waitFor(t, "PVC "+claim+" status capacity grown", func(ctx context.Context) (bool, string, error) {
		c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got := c.Status.Capacity.Storage()
		var conds []string
		resizing := false
		for _, cond := range c.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", cond.Type, cond.Status, cond.Message))
			resizing = resizing || cond.Type == corev1.PersistentVolumeClaimResizing ||
				cond.Type == corev1.PersistentVolumeClaimFileSystemResizePending
		}
		return got.Value() >= size && !resizing,
			fmt.Sprintf("capacity %s, conditions %v, resize status %v", got, conds, c.Status.AllocatedResourceStatuses), nil
	})
}

// waitFSGrown waits for the filesystem mounted at path on the node to exceed 90% of size (the rest is the
// filesystem's own).
func waitFSGrown(t testing.TB, n node, path string, size int64) {
	t.Helper()
	waitFor(t, "filesystem at "+path+" grown", func(context.Context) (bool, string, error) {
		got, err := fsSize(n, path)
		if err != nil {
			return false, "", err
		}
		return got > size/10*9, fmt.Sprintf("%d bytes (%.2f GiB)", got, float64(got)/float64(gib)), nil
	})
}
