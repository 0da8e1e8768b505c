//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scenarioTeardown deletes the run's pods, snapshots and claims and checks that nothing stays behind: no PV and no
// VolumeAttachment of the run (on the local cluster: of the driver), no cloud volume or snapshot made for the
// namespace, and on the host no mount below pods/ or plugins/kubernetes.io/csi/ and no loop device on a volume file
// or on a kubelet path. Then the namespace goes, and no container of the controller, fakecloud or the
// snapshot-controller may have restarted since the run began.
func scenarioTeardown(t *testing.T, r *run) {
	r.deletePodsAndWait(t, "pods", metav1.ListOptions{})

	// A group's VolumeSnapshots go with their VolumeGroupSnapshot only. A cluster without the group CRDs has none.
	snaps := r.dyn.Resource(volumeSnapshots).Namespace(r.ns)
	groups := r.dyn.Resource(volumeGroupSnapshots).Namespace(r.ns)
	if r.noSnapshots == "" {
		if err := groups.DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete VolumeGroupSnapshots: %v", err)
		}
		if err := snaps.DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("delete VolumeSnapshots: %v", err)
		}
	}
	waitGone(t, "VolumeGroupSnapshots, VolumeSnapshots and their contents", func(ctx context.Context) ([]string, error) {
		if r.noSnapshots != "" {
			return nil, nil
		}
		var left []string
		gl, err := groups.List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		if gl != nil {
			for _, g := range gl.Items {
				left = append(left, "group "+g.GetName())
			}
		}
		list, err := snaps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, vs := range list.Items {
			left = append(left, vs.GetName())
		}
		contents, err := r.dyn.Resource(snapshotContent).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, c := range contents.Items {
			if ns, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "namespace"); ns == r.ns {
				left = append(left, "content "+c.GetName())
			}
		}
		return left, nil
	})

	claims := r.cs.CoreV1().PersistentVolumeClaims(r.ns)
	if err := claims.DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete PVCs: %v", err)
	}
	waitGone(t, "PVCs", func(ctx context.Context) ([]string, error) {
		list, err := claims.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var left []string
		for _, c := range list.Items {
			left = append(left, c.Name)
		}
		return left, nil
	})
	waitGone(t, "PVs", func(ctx context.Context) ([]string, error) {
		pvs, err := r.runPVs(ctx)
		if err != nil {
			return nil, err
		}
		var left []string
		for _, pv := range pvs {
			left = append(left, fmt.Sprintf("%s (%s)", pv.Name, pv.Status.Phase))
		}
		return left, nil
	})
	waitGone(t, "VolumeAttachments", func(ctx context.Context) ([]string, error) {
		vas, err := r.runAttachments(ctx)
		if err != nil {
			return nil, err
		}
		var left []string
		for _, va := range vas {
			left = append(left, vaStatus(&va))
		}
		return left, nil
	})

	if r.cloud != nil {
		waitGone(t, "cloud volumes", func(ctx context.Context) ([]string, error) {
			vols, err := r.cloud.volumes(ctx)
			if err != nil {
				return nil, err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			var left []string
			for _, v := range vols {
				if env.local || v.tag(tagPVCNamespace) == r.ns || r.volumes[v.ID] {
					left = append(left, v.String())
				}
			}
			return left, nil
		})
		waitFor(t, "cloud snapshots gone", func(ctx context.Context) (bool, string, error) {
			snaps, err := r.cloud.snapshotsTagged(ctx, tagSnapshotNamespace, r.ns)
			if err != nil {
				return false, "", err
			}
			return len(snaps) == 0, fmt.Sprint(snaps), nil
		})
	}

	if r.host {
		r.waitHostReleased(t, r.ours)
	}

	if err := r.cs.CoreV1().Namespaces().Delete(t.Context(), r.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace %s: %v", r.ns, err)
	}
	waitFor(t, "namespace "+r.ns+" gone", func(ctx context.Context) (bool, string, error) {
		ns, err := r.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "deleted", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("phase %s, conditions %v", ns.Status.Phase, ns.Status.Conditions), nil
	})
	r.tornDown = true
	r.checkNoRestarts(t, r.restarts)
}
