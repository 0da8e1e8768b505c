//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// scenarioLabel marks the objects of a scenario that deletes its own before the teardown.
	scenarioLabel = "e2e.diskforge.io/scenario"
	// maxVolumeCountReason is the scheduler's (NodeVolumeLimits) reason for a node whose CSINode count a pod's
	// volumes would exceed.
	maxVolumeCountReason = "exceed max volume count"
)

// scenarioVolumeLimit: the scheduler keeps each node within the volume limit its node plugin reports, and that
// limit is the one fakecloud enforces. Block claims (nothing to format) fill the node with the fewest free slots
// to its CSINode count, the volumes already attached there (VolumeAttachments, and pods' claims) counted, with a
// pod that requires the node. Then a pod with one new claim that prefers the full node runs on another, and a pod
// that requires it stays pending for the volume count; fakecloud refused no attachment for its limit. At the end
// the scenario deletes what it made and waits for its volumes, attachments, mounts and loop devices to go.
func scenarioVolumeLimit(t *testing.T, r *run) {
	r.needZones(t, 2, false)
	full, limit, used := r.leastFreeNode(t)
	free := limit - used
	t.Logf("filling %s: %d of its %d volume slots in use, %d claims to fill it", full.Name, used, limit, free)
	s := &limitScenario{r: r, label: "volume-limit"}
	t.Cleanup(s.release)
	var refusedBefore float64
	if r.cloud != nil {
		var err error
		if refusedBefore, err = r.cloud.requestCount(t.Context(), "AttachVolume", "AttachmentLimitExceeded"); err != nil {
			t.Fatal(err)
		}
	}

	// Fill: one pod with the remaining claims, which must run on the node.
	claims := make([]string, free)
	for i := range claims {
		claims[i] = fmt.Sprintf("fill-%02d", i)
		s.createPVC(t, claims[i])
	}
	if free > 0 {
		p := s.createPod(t, "fill", requireNode(full.Hostname), claims...)
		waitWithin(t, "pod fill running", 2*waitTimeout, r.podRunning("fill"))
		if p = r.getPod(t, p.Name); p.Spec.NodeName != full.Name {
			t.Fatalf("pod fill runs on %s, want %s", p.Spec.NodeName, full.Name)
		}
	}
	for _, c := range claims {
		_, pv := r.waitPVCBound(t, c)
		s.notePV(pv)
	}
	waitFor(t, full.Name+" full: all its VolumeAttachments attached", func(ctx context.Context) (bool, string, error) {
		vas, err := r.nodeAttachments(ctx, full.Name)
		if err != nil {
			return false, "", err
		}
		attached := 0
		for _, va := range vas {
			if va.Status.Attached {
				attached++
			}
		}
		return attached == limit && len(vas) == limit, fmt.Sprintf("%d of %d attached", attached, len(vas)), nil
	})
	if r.cloud != nil {
		inst, err := r.cloud.instance(t.Context(), full.InstanceID)
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.cloudAttachments(t.Context(), full.InstanceID)
		if err != nil {
			t.Fatal(err)
		}
		if inst.AttachmentLimit != limit || n != limit {
			t.Fatalf("instance %s (%s): fakecloud holds %d attachments, its limit is %d; CSINode says %d", inst.ID,
				inst.InstanceType, n, inst.AttachmentLimit, limit)
		}
		t.Logf("instance %s (%s): %d attachments, fakecloud's limit and CSINode's count alike", inst.ID,
			inst.InstanceType, n)
	}

	// (a) A pod that prefers the full node, with a new claim, runs elsewhere: its volume is made for that node.
	s.createPVC(t, "spill")
	s.createPod(t, "spill", preferNode(full.Hostname), "spill")
	p := r.waitPodRunning(t, "spill")
	if p.Spec.NodeName == full.Name {
		t.Fatalf("pod spill was scheduled on the full node %s", full.Name)
	}
	_, pv := r.waitPVCBound(t, "spill")
	s.notePV(pv)
	t.Logf("pod spill, preferring %s, runs on %s", full.Name, p.Spec.NodeName)

	// (b) A pod that requires the full node stays pending, for the volume count, and its claim waits with it.
	s.createPVC(t, "stuck")
	s.createPod(t, "stuck", requireNode(full.Hostname), "stuck")
	if msg := r.waitFailedScheduling(t, "stuck"); !strings.Contains(msg, maxVolumeCountReason) {
		t.Fatalf("pod stuck: FailedScheduling %q does not say %q", msg, maxVolumeCountReason)
	}
	consistently(t, "pod stuck unschedulable for the volume count, its claim unbound", 5*time.Second,
		func(ctx context.Context) (bool, string, error) {
			p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, "stuck", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending ||
				!slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
					return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
						c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, maxVolumeCountReason)
				}) {
				return false, podStatus(p), nil
			}
			c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, "stuck", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if c.Spec.VolumeName != "" || c.Annotations[selectedNodeAnnotation] != "" {
				return false, fmt.Sprintf("claim stuck: volume %q, selected node %q", c.Spec.VolumeName,
					c.Annotations[selectedNodeAnnotation]), nil
			}
			return true, "", nil
		})
	if r.cloud != nil {
		refused, err := r.cloud.requestCount(t.Context(), "AttachVolume", "AttachmentLimitExceeded")
		if err != nil {
			t.Fatal(err)
		}
		if refused != refusedBefore {
			t.Fatalf("fakecloud refused %v AttachVolume calls with AttachmentLimitExceeded during the scenario",
				refused-refusedBefore)
		}
		t.Logf("fakecloud: no AttachVolume refused with AttachmentLimitExceeded (%v before and after)", refused)
	}

	s.teardown(t)
}

// leastFreeNode picks the node with the fewest free volume slots (ties: the first by name) and returns it with its
// CSINode count and how many of its slots are in use.
func (r *run) leastFreeNode(t *testing.T) (n node, limit, used int) {
	t.Helper()
	// A volume whose pod an earlier scenario deleted stays attached for a few seconds after the pod is gone; counted
	// now, it would leave the node one volume short of full once its detach ends.
	waitGone(t, "VolumeAttachments whose pods are gone", func(ctx context.Context) ([]string, error) {
		var left []string
		for _, c := range r.nodes {
			attached, claimed, err := r.nodeVolumes(ctx, c.Name)
			if err != nil {
				return nil, err
			}
			for pv := range attached {
				if !claimed[pv] {
					left = append(left, c.Name+": "+pv)
				}
			}
		}
		return left, nil
	})
	free := -1
	for _, c := range r.nodes {
		l, ok, err := r.volumeLimit(t.Context(), c.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("node %s: the driver reports no volume limit in CSINode", c.Name)
		}
		u, err := r.volumesInUse(t.Context(), c.Name)
		if err != nil {
			t.Fatal(err)
		}
		if u > l {
			t.Fatalf("node %s holds %d volumes, more than its limit %d", c.Name, u, l)
		}
		t.Logf("node %s: %d of %d volume slots in use", c.Name, u, l)
		if free < 0 || l-u < free || (l-u == free && c.Name < n.Name) {
			n, limit, used, free = c, l, u, l-u
		}
	}
	return n, limit, used
}

// volumesInUse counts the driver's volumes on a node as the scheduler does: the claims of the pods on it and the
// VolumeAttachments to it, each volume once.
func (r *run) volumesInUse(ctx context.Context, nodeName string) (int, error) {
	attached, claimed, err := r.nodeVolumes(ctx, nodeName)
	if err != nil {
		return 0, err
	}
	for pv := range claimed {
		attached[pv] = true
	}
	return len(attached), nil
}

// nodeVolumes returns the driver's PVs on a node: those with a VolumeAttachment to it, and the bound claims of the
// pods on it that have not ended.
func (r *run) nodeVolumes(ctx context.Context, nodeName string) (attached, claimed map[string]bool, err error) {
	attached, claimed = map[string]bool{}, map[string]bool{}
	vas, err := r.nodeAttachments(ctx, nodeName)
	if err != nil {
		return nil, nil, err
	}
	for _, va := range vas {
		attached[*va.Spec.Source.PersistentVolumeName] = true
	}
	pods, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			c, err := r.cs.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			if c.Spec.VolumeName == "" {
				continue // not bound yet: not on the node yet
			}
			pv, err := r.cs.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driverName {
				claimed[pv.Name] = true
			}
		}
	}
	return attached, claimed, nil
}

// cloudAttachments counts fakecloud's attachments to an instance, in every state.
func (r *run) cloudAttachments(ctx context.Context, instanceID string) (int, error) {
	vols, err := r.cloud.volumes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vols {
		for _, a := range v.Attachments {
			if a.InstanceID == instanceID {
				n++
			}
		}
	}
	return n, nil
}

// limitScenario is what the volume-limit scenario made: its objects carry scenarioLabel=label.
type limitScenario struct {
	r       *run
	label   string
	pvs     []string
	volumes []string
	done    bool
}

func (s *limitScenario) selector() string { return scenarioLabel + "=" + s.label }

func (s *limitScenario) createPVC(t *testing.T, name string) {
	t.Helper()
	c := pvc(name, s.r.ns, classExt4, 1*gib, true, "")
	c.Labels[scenarioLabel] = s.label
	s.r.createPVC(t, c)
}

// createPod creates a pod of block claims with affinity; it does not wait.
func (s *limitScenario) createPod(t *testing.T, name string, affinity *corev1.Affinity, claims ...string) *corev1.Pod {
	t.Helper()
	p := appPod(name, s.r.ns, env.testImage, true, claims...)
	p.Labels[scenarioLabel] = s.label
	p.Spec.Affinity = affinity
	p, err := s.r.cs.CoreV1().Pods(s.r.ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	s.r.notePod(p.UID)
	return p
}

func (s *limitScenario) notePV(pv *corev1.PersistentVolume) {
	s.pvs = append(s.pvs, pv.Name)
	if pv.Spec.CSI != nil {
		s.volumes = append(s.volumes, pv.Spec.CSI.VolumeHandle)
		s.r.noteVolume(pv.Spec.CSI.VolumeHandle)
	}
}

// ours reports whether a host path (mount point, loop device backing file) is one of the scenario's volumes'.
func (s *limitScenario) ours(path string) bool {
	return slices.ContainsFunc(append(slices.Clone(s.pvs), s.volumes...), func(name string) bool {
		return strings.Contains(path, name)
	})
}

// teardown deletes the scenario's pods and claims and waits until their PVs, VolumeAttachments, cloud volumes,
// mounts and loop devices are gone.
func (s *limitScenario) teardown(t *testing.T) {
	t.Helper()
	r, ctx, sel := s.r, t.Context(), metav1.ListOptions{LabelSelector: s.selector()}
	start := time.Now()
	r.deletePodsAndWait(t, "the scenario's pods", sel)
	if err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Fatalf("delete PVCs: %v", err)
	}
	s.done = true
	waitGone(t, "the scenario's PVs and VolumeAttachments", func(ctx context.Context) ([]string, error) {
		var left []string
		for _, pv := range s.pvs {
			_, err := r.cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			switch {
			case err == nil:
				left = append(left, "PV "+pv)
			case !apierrors.IsNotFound(err):
				return nil, err
			}
		}
		vas, err := r.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, va := range vas.Items {
			if src := va.Spec.Source.PersistentVolumeName; src != nil && slices.Contains(s.pvs, *src) {
				left = append(left, vaStatus(&va))
			}
		}
		return left, nil
	})
	if r.cloud != nil {
		waitGone(t, "the scenario's cloud volumes", func(ctx context.Context) ([]string, error) {
			vols, err := r.cloud.volumes(ctx)
			var left []string
			for _, v := range vols {
				if slices.Contains(s.volumes, v.ID) {
					left = append(left, v.String())
				}
			}
			return left, err
		})
	}
	if r.host {
		r.waitHostReleased(t, s.ours)
	}
	t.Logf("deleted %d volumes and their pods in %s", len(s.pvs), time.Since(start).Round(time.Millisecond))
}

// release deletes the scenario's pods and claims if it failed before its teardown did, without waiting: the
// teardown scenario (or the run's cleanup) waits for them to go.
func (s *limitScenario) release() {
	if s.done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: s.selector()}
	_ = s.r.cs.CoreV1().Pods(s.r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	_ = s.r.cs.CoreV1().PersistentVolumeClaims(s.r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
}
