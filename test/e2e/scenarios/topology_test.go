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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scenarioAllowedTopologies: a claim of a class allowed in zone a only, for a pod forced to the zone-b node: the
// scheduler refuses the pod (FailedScheduling, because of the volume), the claim is never handed to the provisioner
// and no cloud volume is made for it.
func scenarioAllowedTopologies(t *testing.T, r *run) {
	r.needZones(t, 1, true)
	n := *r.nodeB
	const claim, podName = "zone-a-only", "zone-conflict"
	r.createPVC(t, pvc(claim, r.ns, classZoneA, 1*gib, false, ""))
	p, err := r.cs.CoreV1().Pods(r.ns).Create(t.Context(), pod(podName, r.ns, n.Hostname, claim, env.testImage, false), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", podName, err)
	}
	r.notePod(p.UID)

	message := r.waitFailedScheduling(t, podName)
	if !strings.Contains(strings.ToLower(message), "volume") {
		t.Errorf("FailedScheduling does not blame the volume: %q", message)
	}

	// For a while: the pod stays pending and unscheduled, the claim pending without a selected node or a PV, and the
	// cloud has no volume for it.
	consistently(t, "pod and claim pending, no volume", 5*time.Second, func(ctx context.Context) (bool, string, error) {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
			return false, "pod " + podStatus(p), nil
		}
		c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.Annotations[selectedNodeAnnotation] != "" {
			return false, fmt.Sprintf("claim %s volume %q selected node %q", c.Status.Phase, c.Spec.VolumeName,
				c.Annotations[selectedNodeAnnotation]), nil
		}
		pvs, err := r.runPVs(ctx)
		if err != nil {
			return false, "", err
		}
		if i := slices.IndexFunc(pvs, func(pv corev1.PersistentVolume) bool {
			return pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == r.ns && pv.Spec.ClaimRef.Name == claim
		}); i >= 0 {
			return false, "PV " + pvs[i].Name + " made for the claim", nil
		}
		if r.cloud != nil {
			vols, err := r.cloud.volumesOfNamespace(ctx, r.ns)
			if err != nil {
				return false, "", err
			}
			for _, v := range vols {
				if v.tag(tagPVCName) == claim {
					return false, "cloud volume made for the claim: " + v.String(), nil
				}
			}
		}
		return true, "", nil
	})
	t.Logf("pod %s refused on %s (%s, class allows %s only): %s", podName, n.Name, n.Zone, r.zoneA, message)
}
