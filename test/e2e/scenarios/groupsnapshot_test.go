//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	groupSnapshotGroup    = "groupsnapshot.storage.k8s.io"
	volumeGroupSnapshots  = schema.GroupVersionResource{Group: groupSnapshotGroup, Version: "v1", Resource: "volumegroupsnapshots"}
	groupSnapshotClasses  = schema.GroupVersionResource{Group: groupSnapshotGroup, Version: "v1", Resource: "volumegroupsnapshotclasses"}
	groupSnapshotContents = schema.GroupVersionResource{Group: groupSnapshotGroup, Version: "v1", Resource: "volumegroupsnapshotcontents"}
)

// scenarioGroupSnapshot: one pod counts in two volumes, always writing (and syncing) the count to volume A
// before volume B, so on disk B's count is never ahead of A's. A VolumeGroupSnapshot of both claims (by label)
// takes them at one instant (CreateSnapshots on their node's instance); two claims restored from the group's
// VolumeSnapshots must keep that order: B's count at most A's.
func scenarioGroupSnapshot(t *testing.T, r *run) {
	if r.noSnapshots != "" {
		t.Fatal(r.noSnapshots)
	}
	const group, selector = "counters", "e2e.diskforge.io/group"
	// The class stays until the run ends (deleteClasses): the snapshot controller reads it for the group's members
	// and its deletion, and a group whose class went is deleted only after a minute or more of its retries.
	classes := r.dyn.Resource(groupSnapshotClasses)
	_ = classes.Delete(t.Context(), classGroupSnapshots, metav1.DeleteOptions{})
	if _, err := classes.Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": groupSnapshotGroup + "/v1", "kind": "VolumeGroupSnapshotClass",
		"metadata": map[string]any{"name": classGroupSnapshots, "labels": map[string]any{runLabel: r.ns}},
		"driver":   driverName, "deletionPolicy": "Delete",
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeGroupSnapshotClass %s: %v", classGroupSnapshots, err)
	}

	claims := []string{"count-a", "count-b"}
	for _, c := range claims {
		p := pvc(c, r.ns, classExt4, gib, false, "")
		p.Labels[selector] = group
		r.createPVC(t, p)
	}
	// A then B, each synced before the next write: B <= A on disk at every instant.
	writer := appPod("counter", r.ns, env.testImage, false, claims...)
	writer.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); " +
		"echo $i > " + dataDir + "0/count; sync; echo $i > " + dataDir + "1/count; sync; done"}
	if _, err := r.cs.CoreV1().Pods(r.ns).Create(t.Context(), writer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod counter: %v", err)
	}
	r.waitPodRunning(t, "counter")
	waitFor(t, "the counter to count", func(ctx context.Context) (bool, string, error) {
		a, b, err := r.counts(ctx, "counter")
		return err == nil && b > 10, fmt.Sprintf("A=%d B=%d", a, b), nil
	})

	if _, err := r.dyn.Resource(volumeGroupSnapshots).Namespace(r.ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": groupSnapshotGroup + "/v1", "kind": "VolumeGroupSnapshot",
		"metadata": map[string]any{"name": group, "labels": map[string]any{runLabel: r.ns}},
		"spec": map[string]any{"volumeGroupSnapshotClassName": classGroupSnapshots,
			"source": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{selector: group}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeGroupSnapshot %s: %v", group, err)
	}
	var vgs *unstructured.Unstructured
	waitFor(t, "VolumeGroupSnapshot "+group+" ready", func(ctx context.Context) (bool, string, error) {
		var err error
		if vgs, err = r.dyn.Resource(volumeGroupSnapshots).Namespace(r.ns).Get(ctx, group, metav1.GetOptions{}); err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedBool(vgs.Object, "status", "readyToUse")
		msg, _, _ := unstructured.NestedString(vgs.Object, "status", "error", "message")
		return ready, "error: " + msg, nil
	})

	// The group's VolumeSnapshots, by the claim each is of. The snapshot controller makes them (owned by the group,
	// their source the claim) before it marks the group ready, but fills in their status only later. Each must be of
	// a volume the group's content lists, with the snapshot the content pairs with it.
	contentName, _, _ := unstructured.NestedString(vgs.Object, "status", "boundVolumeGroupSnapshotContentName")
	content, err := r.dyn.Resource(groupSnapshotContents).Get(t.Context(), contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VolumeGroupSnapshotContent %q: %v", contentName, err)
	}
	pairs, _, _ := unstructured.NestedSlice(content.Object, "status", "volumeSnapshotInfoList")
	snapshotHandleOf := map[string]string{}
	for _, p := range pairs {
		m, _ := p.(map[string]any)
		snapshotHandleOf[fmt.Sprint(m["volumeHandle"])] = fmt.Sprint(m["snapshotHandle"])
	}
	snapshotOf := map[string]string{}
	waitFor(t, "the group's VolumeSnapshots", func(ctx context.Context) (bool, string, error) {
		list, err := r.dyn.Resource(volumeSnapshots).Namespace(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		clear(snapshotOf)
		for _, vs := range list.Items {
			if slices.ContainsFunc(vs.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == vgs.GetUID() }) {
				claim, _, _ := unstructured.NestedString(vs.Object, "spec", "source", "persistentVolumeClaimName")
				snapshotOf[claim] = vs.GetName()
			}
		}
		return len(snapshotOf) == len(claims), fmt.Sprintf("by claim: %v", snapshotOf), nil
	})
	for _, c := range claims {
		if snapshotOf[c] == "" {
			t.Fatalf("the group's VolumeSnapshots by claim: %v; none of claim %s", snapshotOf, c)
		}
		_, pv := r.waitPVCBound(t, c)
		vs := r.waitSnapshotReady(t, snapshotOf[c])
		sc, err := r.snapshotContentOf(t.Context(), vs)
		if err != nil {
			t.Fatal(err)
		}
		handle, _, _ := unstructured.NestedString(sc.Object, "status", "snapshotHandle")
		if want := snapshotHandleOf[pv.Spec.CSI.VolumeHandle]; handle == "" || handle != want {
			t.Fatalf("VolumeSnapshot %s of claim %s (volume %s) holds snapshot %q; the group's content pairs the volume with %q",
				vs.GetName(), c, pv.Spec.CSI.VolumeHandle, handle, want)
		}
	}
	t.Logf("group %s: content %s, snapshots %v", group, contentName, snapshotOf)

	var restored []string
	for _, c := range claims {
		name := c + "-restored"
		r.createPVC(t, pvc(name, r.ns, classExt4, gib, false, snapshotOf[c]))
		restored = append(restored, name)
	}
	if _, err := r.cs.CoreV1().Pods(r.ns).Create(t.Context(), appPod("reader", r.ns, env.testImage, false, restored...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod reader: %v", err)
	}
	r.waitPodRunning(t, "reader")
	a, b, err := r.counts(t.Context(), "reader")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored counts: A=%d B=%d", a, b)
	if b < 1 || b > a {
		t.Fatalf("restored counts A=%d B=%d: B was written after A each time, so a snapshot of one instant has 0 < B <= A", a, b)
	}
}

// counts reads the counters of a pod that has the two count volumes at /data0 and /data1.
func (r *run) counts(ctx context.Context, pod string) (a, b int, err error) {
	out, err := r.execIn(ctx, pod, nil, "sh", "-c", "cat "+dataDir+"0/count; cat "+dataDir+"1/count")
	if err != nil {
		return 0, 0, fmt.Errorf("read counts in %s: %w (%s)", pod, err, out)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("counts in %s: %q", pod, out)
	}
	if a, err = strconv.Atoi(f[0]); err == nil {
		b, err = strconv.Atoi(f[1])
	}
	return a, b, err
}
