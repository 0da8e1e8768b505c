//go:build e2e

package scenarios

import (
	"context"
	"fmt"
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
	const class, group, selector = "e2e-group-snap", "counters", "e2e.diskforge.io/group"
	classes := r.dyn.Resource(groupSnapshotClasses)
	_ = classes.Delete(t.Context(), class, metav1.DeleteOptions{})
	if _, err := classes.Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": groupSnapshotGroup + "/v1", "kind": "VolumeGroupSnapshotClass",
		"metadata": map[string]any{"name": class, "labels": map[string]any{runLabel: r.ns}},
		"driver":   driverName, "deletionPolicy": "Delete",
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeGroupSnapshotClass %s: %v", class, err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), class, metav1.DeleteOptions{}) })

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
		"spec": map[string]any{"volumeGroupSnapshotClassName": class,
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

	// The group's VolumeSnapshots, by the claim each is of: its content's snapshot handle, paired with a volume
	// handle in the group's content, which is a claim's PV.
	contentName, _, _ := unstructured.NestedString(vgs.Object, "status", "boundVolumeGroupSnapshotContentName")
	content, err := r.dyn.Resource(groupSnapshotContents).Get(t.Context(), contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VolumeGroupSnapshotContent %q: %v", contentName, err)
	}
	pairs, _, _ := unstructured.NestedSlice(content.Object, "status", "volumeSnapshotInfoList")
	volumeOf := map[string]string{}
	for _, p := range pairs {
		m, _ := p.(map[string]any)
		volumeOf[fmt.Sprint(m["snapshotHandle"])] = fmt.Sprint(m["volumeHandle"])
	}
	claimOf := map[string]string{}
	for _, c := range claims {
		_, pv := r.waitPVCBound(t, c)
		claimOf[pv.Spec.CSI.VolumeHandle] = c
	}
	snapshotOf := map[string]string{}
	list, err := r.dyn.Resource(volumeSnapshots).Namespace(r.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		vs := &list.Items[i]
		if g, _, _ := unstructured.NestedString(vs.Object, "status", "volumeGroupSnapshotName"); g != group {
			continue
		}
		vs = r.waitSnapshotReady(t, vs.GetName())
		c, err := r.snapshotContentOf(t.Context(), vs)
		if err != nil {
			t.Fatal(err)
		}
		handle, _, _ := unstructured.NestedString(c.Object, "status", "snapshotHandle")
		snapshotOf[claimOf[volumeOf[handle]]] = vs.GetName()
	}
	if snapshotOf["count-a"] == "" || snapshotOf["count-b"] == "" || len(snapshotOf) != 2 {
		t.Fatalf("the group's VolumeSnapshots by claim: %v (pairs %v, claims by volume %v)", snapshotOf, volumeOf, claimOf)
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
