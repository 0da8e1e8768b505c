// Package selftest proves an installed driver works end to end through the Kubernetes API, as a user's
// workloads use it: a claim, a pod writing to it, a snapshot, the snapshot restored into a new claim and read
// back, the first claim expanded and read again, and everything deleted. It is what `helm test` runs (the
// driver's `selftest` subcommand, in the chart's templates/tests); an error names the step that failed.
//
// It needs, in its namespace only: persistentvolumeclaims (create, get, patch, delete), pods (create, get,
// delete) and snapshot.storage.k8s.io volumesnapshots (create, get, delete).
package selftest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// SnapshotResource is the VolumeSnapshot API.
var SnapshotResource = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

// Options shape a run.
type Options struct {
	Namespace     string
	StorageClass  string
	SnapshotClass string
	// Image runs the pods that write and read: it needs sh, echo, cat, df and awk (the driver's image has busybox).
	Image string
	// Size of the claim, and what it is expanded to.
	Size, ExpandedSize resource.Quantity
	// Prefix of every object's name; a run first deletes what an earlier one left under it.
	Prefix string
	// StepTimeout bounds each step.
	StepTimeout time.Duration
	// Poll is how often a step looks again; 0 means 2 s.
	Poll time.Duration
	// Log receives a line per step.
	Log func(format string, args ...any)
}

// Run runs every step, then deletes what it made (also after a failure). The error names the failed step.
func Run(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, o Options) error {
	if o.Poll == 0 {
		o.Poll = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	r := &run{kube: kube, dyn: dyn, o: o, data: fmt.Sprintf("diskforge selftest %d", time.Now().UnixNano())}
	steps := []struct {
		name string
		do   func(context.Context) error
	}{
		{"delete what an earlier run left", r.cleanup},
		{"create a claim", r.createClaim},
		{"write data to the claim from a pod", r.write},
		{"take a snapshot of the claim", r.snapshot},
		{"restore the snapshot into a new claim and read the data back", r.restore},
		{"expand the claim and read the data again", r.expand},
	}
	var failed error
	for i, s := range steps {
		o.Log("step %d/%d: %s", i+1, len(steps), s.name)
		start := time.Now()
		stepCtx, cancel := context.WithTimeout(ctx, o.StepTimeout)
		err := s.do(stepCtx)
		cancel()
		if err != nil {
			failed = fmt.Errorf("step %q failed: %w", s.name, err)
			break
		}
		o.Log("  ok (%s)", time.Since(start).Round(100*time.Millisecond))
	}
	// The cleanup runs whatever happened, with its own time.
	o.Log("step: delete the claims, pods and snapshot (and wait for the volumes to be deleted)")
	cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.StepTimeout)
	defer cancel()
	if err := r.cleanup(cleanCtx); err != nil {
		return errors.Join(failed, fmt.Errorf("step %q failed: %w", "delete what the test made", err))
	}
	return failed
}

type run struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	o    Options
	data string
	pvs  []string // the volumes of the claims, which must be gone after the cleanup
}

func (r *run) name(part string) string { return r.o.Prefix + "-" + part }

func (r *run) claims() typedcorev1.PersistentVolumeClaimInterface {
	return r.kube.CoreV1().PersistentVolumeClaims(r.o.Namespace)
}

func (r *run) pods() typedcorev1.PodInterface { return r.kube.CoreV1().Pods(r.o.Namespace) }

func (r *run) claim(name string, source *corev1.TypedLocalObjectReference) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": r.o.Prefix}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &r.o.StorageClass,
			DataSource:       source,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: r.o.Size},
			},
		},
	}
}

func (r *run) createClaim(ctx context.Context) error {
	_, err := r.claims().Create(ctx, r.claim(r.name("source"), nil), metav1.CreateOptions{})
	return err
}

// write runs a pod that writes the run's data to the source claim, then deletes it so that the volume is
// unstaged before it grows (ext4 grows offline, when next staged).
func (r *run) write(ctx context.Context) error {
	return r.runPod(ctx, r.name("writer"), r.name("source"), `echo "$DATA" > /data/data && sync && cat /data/data`)
}

func (r *run) snapshot(ctx context.Context) error {
	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": SnapshotResource.GroupVersion().String(),
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": r.name("snapshot"), "namespace": r.o.Namespace},
		"spec": map[string]any{
			"volumeSnapshotClassName": r.o.SnapshotClass,
			"source":                  map[string]any{"persistentVolumeClaimName": r.name("source")},
		},
	}}
	snaps := r.dyn.Resource(SnapshotResource).Namespace(r.o.Namespace)
	if _, err := snaps.Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		return err
	}
	return r.poll(ctx, "the snapshot to be ready to use", func() (bool, string, error) {
		got, err := snaps.Get(ctx, r.name("snapshot"), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		msg, _, _ := unstructured.NestedString(got.Object, "status", "error", "message")
		return ready, msg, nil
	})
}

func (r *run) restore(ctx context.Context) error {
	group := SnapshotResource.Group
	src := &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: r.name("snapshot")}
	if _, err := r.claims().Create(ctx, r.claim(r.name("restored"), src), metav1.CreateOptions{}); err != nil {
		return err
	}
	return r.runPod(ctx, r.name("reader"), r.name("restored"),
		`got=$(cat /data/data) || exit 1; [ "$got" = "$DATA" ] || { echo "read \"$got\", want \"$DATA\""; exit 1; }`)
}

// expand grows the source claim, then mounts it in a pod that reads the data and checks the filesystem's size,
// and waits for the claim to report its new capacity.
func (r *run) expand(ctx context.Context) error {
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, r.o.ExpandedSize.String())
	if _, err := r.claims().Patch(ctx, r.name("source"), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	// The filesystem must hold more than the old size (its own overhead aside): 90 % of the new size in KiB.
	minKiB := r.o.ExpandedSize.Value() / 1024 * 9 / 10
	script := fmt.Sprintf(`got=$(cat /data/data) || exit 1; [ "$got" = "$DATA" ] || { echo "read \"$got\", want \"$DATA\""; exit 1; }
size=$(df -k /data | awk 'NR == 2 { print $2 }'); [ "$size" -ge %d ] || { echo "filesystem of $size KiB, want at least %d"; exit 1; }`,
		minKiB, minKiB)
	if err := r.runPod(ctx, r.name("grown"), r.name("source"), script); err != nil {
		return err
	}
	return r.poll(ctx, "the claim to report its new capacity", func() (bool, string, error) {
		pvc, err := r.claims().Get(ctx, r.name("source"), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		return got.Cmp(r.o.ExpandedSize) >= 0, "capacity " + got.String(), nil
	})
}

// runPod runs script in a pod with claim at /data until it succeeds, then deletes the pod and waits until it is
// gone. A failed pod's error carries the end of its output.
func (r *run) runPod(ctx context.Context, name, claim, script string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": r.o.Prefix}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:                     "test",
				Image:                    r.o.Image,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Command:                  []string{"sh", "-c", script},
				Env:                      []corev1.EnvVar{{Name: "DATA", Value: r.data}},
				VolumeMounts:             []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if _, err := r.pods().Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	err := r.poll(ctx, "pod "+name+" to succeed", func() (bool, string, error) {
		p, err := r.pods().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return true, "", nil
		case corev1.PodFailed:
			return false, "", fmt.Errorf("pod %s failed: %s", name, podOutput(p))
		}
		return false, podWaiting(p), nil
	})
	if err != nil {
		return err
	}
	if err := r.recordVolume(ctx, claim); err != nil {
		return err
	}
	return r.deletePod(ctx, name)
}

// recordVolume notes the claim's volume, which the cleanup waits to be deleted.
func (r *run) recordVolume(ctx context.Context, claim string) error {
	pvc, err := r.claims().Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if v := pvc.Spec.VolumeName; v != "" && !slices.Contains(r.pvs, v) {
		r.pvs = append(r.pvs, v)
	}
	return nil
}

func (r *run) deletePod(ctx context.Context, name string) error {
	if err := r.pods().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return r.poll(ctx, "pod "+name+" to be deleted", func() (bool, string, error) {
		_, err := r.pods().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "", ignoreNotFound(err)
	})
}

// cleanup deletes the run's pods, then the restored claim, the snapshot and the source claim, and waits until
// they and the claims' volumes are gone (their disks deleted: the classes reclaim with Delete).
func (r *run) cleanup(ctx context.Context) error {
	for _, p := range []string{"writer", "reader", "grown"} {
		if err := r.deletePod(ctx, r.name(p)); err != nil {
			return err
		}
	}
	snaps := r.dyn.Resource(SnapshotResource).Namespace(r.o.Namespace)
	type object struct {
		what   string
		delete func() error
		get    func() error
	}
	claim := func(name string) object {
		return object{"claim " + name,
			func() error { return r.claims().Delete(ctx, name, metav1.DeleteOptions{}) },
			func() error { _, err := r.claims().Get(ctx, name, metav1.GetOptions{}); return err }}
	}
	objects := []object{claim(r.name("restored")),
		{"snapshot " + r.name("snapshot"),
			func() error { return snaps.Delete(ctx, r.name("snapshot"), metav1.DeleteOptions{}) },
			func() error { _, err := snaps.Get(ctx, r.name("snapshot"), metav1.GetOptions{}); return err }},
		claim(r.name("source"))}
	for _, pv := range r.pvs {
		objects = append(objects, object{"volume " + pv, func() error { return nil },
			func() error {
				_, err := r.kube.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
				return err
			}})
	}
	for _, o := range objects {
		if err := o.delete(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", o.what, err)
		}
		if err := r.poll(ctx, o.what+" to be deleted", func() (bool, string, error) {
			err := o.get()
			return apierrors.IsNotFound(err), "", ignoreNotFound(err)
		}); err != nil {
			return err
		}
	}
	return nil
}

// poll calls check until it is done, returns an error, or ctx ends; the error then says what was awaited and
// the last state check reported.
func (r *run) poll(ctx context.Context, what string, check func() (done bool, state string, err error)) error {
	last := ""
	for {
		done, state, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if state != "" {
			last = state
		}
		select {
		case <-ctx.Done():
			if last != "" {
				return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(r.o.Poll):
		}
	}
}

// podOutput is what a failed pod's container said, or why it ended.
func podOutput(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			return fmt.Sprintf("exit %d (%s): %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	return firstNonEmpty(p.Status.Message, p.Status.Reason, "no container status")
}

// podWaiting says why a pod has not run yet: its unscheduled or waiting condition, for the timeout's error.
func podWaiting(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return "container " + w.Reason + ": " + w.Message
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return string(c.Type) + ": " + c.Message
		}
	}
	return "phase " + string(p.Status.Phase)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
