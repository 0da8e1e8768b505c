//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskforge/diskforge/test/e2e/cluster"
)

const (
	// instanceIDLabel is the label fakecloud's kube-nodes mode writes on a Node it made an instance of.
	instanceIDLabel = "node.diskforge.io/instance-id"
	// joinTarget bounds a new node's way from its Node's creation to a pod of ours running there with a new volume;
	// leaveTarget a deleted node's way from its Node's deletion to its volumes detached in the cloud.
	joinTarget  = 30 * time.Second
	leaveTarget = 30 * time.Second
)

// scenarioNodeJoinsAndLeaves: a node nobody prepared joins the installed cluster — no zone, instance ID, type or
// provider ID of ours — and fakecloud makes it an instance in the zone with fewest nodes and labels its Node; the
// node plugin, which waited for those labels, registers, and a pod with a new claim runs there. Then the machine
// goes for good and its Node is deleted: fakecloud terminates the instance, which ends its attachments.
//
// Kubernetes' attach/detach controller keeps a deleted node's in-use volumes attached in its own books for its
// maxWaitForUnmountDuration (6 minutes) before it detaches them; the scenario does not wait for that: it deletes the
// orphaned pod and its VolumeAttachment, as that detach would, and the external-attacher's ControllerUnpublishVolume
// of a volume whose instance is gone must then succeed at once.
func scenarioNodeJoinsAndLeaves(t *testing.T, r *run) {
	if r.cloud == nil {
		t.Fatal("the scenario checks fakecloud's instances: it needs the cloud checks")
	}
	ctl := r.nodeControl(t)
	name := cluster.LateNode
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
		defer cancel()
		if err := ctl.RemoveNode(ctx, name); err != nil {
			t.Errorf("remove node %s: %v", name, err)
		}
	})
	if _, err := ctl.AddNode(t.Context(), name); err != nil {
		t.Fatalf("add node %s: %v", name, err)
	}
	kn, err := r.cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	joined := kn.CreationTimestamp.Time

	// fakecloud's instance, as the Node's labels name it.
	var late node
	waitFor(t, "fakecloud's instance labels on "+name, func(ctx context.Context) (bool, string, error) {
		kn, err := r.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		late = node{Name: name, Hostname: name, Zone: kn.Labels[zoneLabel], InstanceID: kn.Labels[instanceIDLabel]}
		return late.Zone != "" && late.InstanceID != "", fmt.Sprintf("labels %v", kn.Labels), nil
	})
	labelled := time.Since(joined)
	inst, err := r.cloud.instance(t.Context(), late.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Zone != late.Zone || inst.State != "running" {
		t.Fatalf("instance %s of %s: zone %s, state %s; want %s, running", inst.ID, name, inst.Zone, inst.State, late.Zone)
	}
	t.Logf("%s joined at %s; fakecloud made it instance %s (%s, %s) within %s", name, joined.Format(time.RFC3339),
		inst.ID, inst.Zone, inst.InstanceType, labelled.Round(time.Second))

	// A new claim used there.
	const claim = "late"
	r.createPVC(t, pvc(claim, r.ns, classXFS, 1*gib, false, ""))
	p := r.createPod(t, claim, claim, late, false)
	took := time.Since(joined)
	_, pv := r.waitPVCBound(t, claim)
	requirePV(t, pv, late.Zone, "xfs", false)
	volumeID := pv.Spec.CSI.VolumeHandle
	r.requireCloudVolume(t, volumeID, late.Zone, late.InstanceID)
	r.writeData(t, p.Name, dataDir, "written on a node that joined")
	t.Logf("pod %s Running on %s with volume %s %s after the node joined (target ≤ %s)", p.Name, name, volumeID,
		took.Round(10*time.Millisecond), joinTarget)
	recordTiming("  node joined → its instance labelled", "ok", labelled)
	recordTiming("  node joined → pod Running with a new volume", result(took <= joinTarget), took)
	if took > joinTarget {
		t.Errorf("a pod with a new volume ran on the new node %s after it joined; target %s", took, joinTarget)
	}

	// The machine goes and its Node is deleted: the instance's termination ends its attachments.
	removed := time.Now()
	if err := ctl.RemoveNode(t.Context(), name); err != nil {
		t.Fatalf("remove node %s: %v", name, err)
	}
	waitFor(t, "instance "+late.InstanceID+" terminated and volume "+volumeID+" detached", func(ctx context.Context) (bool, string, error) {
		inst, err := r.cloud.instance(ctx, late.InstanceID)
		if err != nil {
			return false, "", err
		}
		v, ok, err := r.cloud.volume(ctx, volumeID)
		if err != nil || !ok {
			return false, "volume not in /admin/volumes", err
		}
		return inst.State == "terminated" && v.State == "available" && len(v.Attachments) == 0,
			fmt.Sprintf("instance %s; volume %s", inst.State, v), nil
	})
	left := time.Since(removed)
	t.Logf("%s removed: instance %s terminated and volume %s available %s after (target ≤ %s)", name,
		late.InstanceID, volumeID, left.Round(10*time.Millisecond), leaveTarget)
	recordTiming("  node deleted → its volumes detached", result(left <= leaveTarget), left)
	if left > leaveTarget {
		t.Errorf("the deleted node's volume detached %s after; target %s", left, leaveTarget)
	}

	// Kubernetes' books: the pod bound to a Node that is gone, and the VolumeAttachment the attach/detach
	// controller would delete after its 6 minutes.
	zero := int64(0)
	if err := r.cs.CoreV1().Pods(r.ns).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil &&
		!apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s: %v", p.Name, err)
	}
	va, err := r.volumeAttachment(t.Context(), pv.Name, name)
	if err != nil {
		t.Fatal(err)
	}
	if va != nil {
		if err := r.cs.StorageV1().VolumeAttachments().Delete(t.Context(), va.Name, metav1.DeleteOptions{}); err != nil &&
			!apierrors.IsNotFound(err) {
			t.Fatalf("delete VolumeAttachment %s: %v", va.Name, err)
		}
	}
	unpublish := time.Now()
	r.waitDetached(t, pv.Name, name)
	t.Logf("VolumeAttachment of %s to the deleted node released %s after its deletion (ControllerUnpublishVolume "+
		"of a terminated instance)", pv.Name, time.Since(unpublish).Round(10*time.Millisecond))
	waitFor(t, "no pod left on "+name, func(ctx context.Context) (bool, string, error) {
		pods, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return false, "", err
		}
		var names []string
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				names = append(names, p.Namespace+"/"+p.Name)
			}
		}
		return len(names) == 0, fmt.Sprintf("pods %v", names), nil
	})
}
