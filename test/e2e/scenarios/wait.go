//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// waitTimeout bounds every wait of a scenario; generous, as a loaded machine runs everything at once.
	waitTimeout  = 2 * time.Minute
	pollInterval = 500 * time.Millisecond
)

// permanentError ends a wait at once: the state it saw cannot turn into the one awaited.
type permanentError struct{ error }

func permanent(format string, args ...any) error { return permanentError{fmt.Errorf(format, args...)} }

// condition reports whether the awaited state is reached, and in any case what it saw (reported if the wait
// times out). Errors are taken as transient (the API server or fakecloud being slow) unless permanent.
type condition func(ctx context.Context) (done bool, status string, err error)

// waitFor polls cond every pollInterval for up to waitTimeout and fails the test if it never holds.
func waitFor(t testing.TB, what string, cond condition) {
	t.Helper()
	waitWithin(t, what, waitTimeout, cond)
}

func waitWithin(t testing.TB, what string, timeout time.Duration, cond condition) {
	t.Helper()
	start := time.Now()
	last := "nothing yet"
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		done, status, err := cond(ctx)
		var perm permanentError
		switch {
		case errors.As(err, &perm):
			return false, perm.error
		case err != nil:
			last = "error: " + err.Error()
			return false, nil
		}
		last = status
		return done, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached in %s (%v); last seen: %s", what, time.Since(start).Round(time.Millisecond), err, last)
	}
	t.Logf("%s: %s (%s)", what, last, time.Since(start).Round(time.Millisecond))
}

// waitPVCBound waits for claim to be bound and returns it with its PV.
func (r *run) waitPVCBound(t testing.TB, claim string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	var c *corev1.PersistentVolumeClaim
	waitFor(t, "PVC "+claim+" bound", func(ctx context.Context) (bool, string, error) {
		var err error
		c, err = r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName != "",
			fmt.Sprintf("phase %s, volume %q", c.Status.Phase, c.Spec.VolumeName), nil
	})
	pv, err := r.cs.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PV %s of PVC %s: %v", c.Spec.VolumeName, claim, err)
	}
	r.notePV(pv.Name)
	return c, pv
}

// waitPodRunning waits for the pod to run; a pod that ended cannot get there.
func (r *run) waitPodRunning(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	waitFor(t, "pod "+name+" running", r.podRunning(name))
	return r.getPod(t, name)
}

// podRunning holds once the pod runs, and fails for good once it ended.
func (r *run) podRunning(name string) condition {
	return func(ctx context.Context) (bool, string, error) {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		status := podStatus(p)
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, status, permanent("pod %s ended: %s", name, status)
		}
		return p.Status.Phase == corev1.PodRunning, status, nil
	}
}

func (r *run) getPod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := r.cs.CoreV1().Pods(r.ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func podStatus(p *corev1.Pod) string {
	parts := []string{"phase " + string(p.Status.Phase)}
	if p.Spec.NodeName != "" {
		parts = append(parts, "node "+p.Spec.NodeName)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, w.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// deletePod deletes the pod and waits until it is gone, so that kubelet has torn its volumes down.
func (r *run) deletePod(t testing.TB, name string) {
	t.Helper()
	err := r.cs.CoreV1().Pods(r.ns).Delete(t.Context(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	waitFor(t, "pod "+name+" gone", func(ctx context.Context) (bool, string, error) {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "deleted", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, podStatus(p), nil
	})
}

// deletePodsAndWait deletes the namespace's pods that sel selects and waits until they are gone.
func (r *run) deletePodsAndWait(t testing.TB, what string, sel metav1.ListOptions) {
	t.Helper()
	pods := r.cs.CoreV1().Pods(r.ns)
	if err := pods.DeleteCollection(t.Context(), metav1.DeleteOptions{}, sel); err != nil {
		t.Fatalf("delete %s: %v", what, err)
	}
	waitGone(t, what, func(ctx context.Context) ([]string, error) {
		list, err := pods.List(ctx, sel)
		if err != nil {
			return nil, err
		}
		var left []string
		for _, p := range list.Items {
			left = append(left, p.Name+": "+podStatus(&p))
		}
		return left, nil
	})
}

// volumeAttachment finds the driver's VolumeAttachment of pv to node, if any.
func (r *run) volumeAttachment(ctx context.Context, pv, node string) (*storagev1.VolumeAttachment, error) {
	vas, err := r.nodeAttachments(ctx, node)
	if err != nil {
		return nil, err
	}
	for i, va := range vas {
		if *va.Spec.Source.PersistentVolumeName == pv {
			return &vas[i], nil
		}
	}
	return nil, nil
}

// nodeAttachments are the driver's VolumeAttachments of PVs to node, deleted ones included.
func (r *run) nodeAttachments(ctx context.Context, node string) ([]storagev1.VolumeAttachment, error) {
	list, err := r.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if va.Spec.Attacher == driverName && va.Spec.Source.PersistentVolumeName != nil && va.Spec.NodeName == node {
			out = append(out, va)
		}
	}
	return out, nil
}

func vaStatus(va *storagev1.VolumeAttachment) string {
	if va == nil {
		return "no VolumeAttachment"
	}
	s := fmt.Sprintf("%s attached=%v", va.Name, va.Status.Attached)
	if e := va.Status.AttachError; e != nil {
		s += " attachError: " + e.Message
	}
	if e := va.Status.DetachError; e != nil {
		s += " detachError: " + e.Message
	}
	if va.DeletionTimestamp != nil {
		s += " (deleting)"
	}
	return s
}

// waitAttached waits for the driver's VolumeAttachment of pv to node to report attached.
func (r *run) waitAttached(t testing.TB, pv, node string) *storagev1.VolumeAttachment {
	t.Helper()
	var va *storagev1.VolumeAttachment
	waitFor(t, fmt.Sprintf("VolumeAttachment of %s to %s attached", pv, node), func(ctx context.Context) (bool, string, error) {
		var err error
		va, err = r.volumeAttachment(ctx, pv, node)
		if err != nil {
			return false, "", err
		}
		return va != nil && va.Status.Attached && va.DeletionTimestamp == nil, vaStatus(va), nil
	})
	return va
}

// waitDetached waits until no VolumeAttachment of pv to node remains.
func (r *run) waitDetached(t testing.TB, pv, node string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("VolumeAttachment of %s to %s gone", pv, node), func(ctx context.Context) (bool, string, error) {
		va, err := r.volumeAttachment(ctx, pv, node)
		if err != nil {
			return false, "", err
		}
		return va == nil, vaStatus(va), nil
	})
}

// waitSnapshotReady waits for the VolumeSnapshot to be ready to use and returns it.
func (r *run) waitSnapshotReady(t testing.TB, name string) *unstructured.Unstructured {
	t.Helper()
	var vs *unstructured.Unstructured
	waitFor(t, "VolumeSnapshot "+name+" ready", func(ctx context.Context) (bool, string, error) {
		var err error
		vs, err = r.dyn.Resource(volumeSnapshots).Namespace(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse")
		return ready, snapshotStatus(vs), nil
	})
	return vs
}

func snapshotStatus(vs *unstructured.Unstructured) string {
	ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse")
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	size, _, _ := unstructured.NestedString(vs.Object, "status", "restoreSize")
	s := fmt.Sprintf("readyToUse=%v content=%q restoreSize=%q", ready, content, size)
	if msg, ok, _ := unstructured.NestedString(vs.Object, "status", "error", "message"); ok {
		s += " error: " + msg
	}
	return s
}

// waitFailedScheduling waits for the scheduler's FailedScheduling event of a pod and returns its message.
func (r *run) waitFailedScheduling(t testing.TB, podName string) string {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": podName}.String()
	var message string
	waitWithin(t, "FailedScheduling event of pod "+podName, 30*time.Second, func(ctx context.Context) (bool, string, error) {
		evs, err := r.cs.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range evs.Items {
			seen = append(seen, e.Reason)
			if e.Reason == "FailedScheduling" {
				message = e.Message
				return true, e.Message, nil
			}
		}
		return false, fmt.Sprintf("events: %v", seen), nil
	})
	return message
}

// waitGone waits until list returns nothing: what it returns is what is left.
func waitGone(t testing.TB, what string, list func(ctx context.Context) ([]string, error)) {
	t.Helper()
	waitFor(t, what+" gone", func(ctx context.Context) (bool, string, error) {
		left, err := list(ctx)
		return err == nil && len(left) == 0, fmt.Sprint(left), err
	})
}

// consistently checks cond for the whole duration and fails the test the first time it does not hold.
func consistently(t testing.TB, what string, d time.Duration, cond condition) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, status, err := cond(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !ok {
			t.Fatalf("%s: no longer holds: %s", what, status)
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(pollInterval)
	}
	t.Logf("%s: held for %s", what, d)
}
