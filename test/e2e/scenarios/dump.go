//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dump logs what helps to understand a failure: the namespace's events, claims, pods and snapshots, the run's PVs
// and attachments, and the cloud's volumes of the namespace.
func (r *run) dump(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("---- state of namespace %s ----", r.ns)
	if evs, err := r.cs.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		line("events: %v", err)
	} else {
		items := evs.Items
		sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
		line("events:")
		for _, e := range items {
			line("  %s %s %s/%s %s (x%d): %s", eventTime(e).Format("15:04:05"), e.Type, e.InvolvedObject.Kind,
				e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
		}
	}
	if pvcs, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		line("PVCs: %v", err)
	} else {
		line("PVCs:")
		for _, c := range pvcs.Items {
			line("  %s: phase %s volume %q request %s capacity %s conditions %v annotations %v", c.Name, c.Status.Phase,
				c.Spec.VolumeName, c.Spec.Resources.Requests.Storage(), c.Status.Capacity.Storage(),
				c.Status.Conditions, c.Annotations)
		}
	}
	if pods, err := r.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		line("pods: %v", err)
	} else {
		line("pods:")
		for _, p := range pods.Items {
			line("  %s (uid %s): %s", p.Name, p.UID, podStatus(&p))
		}
	}
	if pvs, err := r.runPVs(ctx); err != nil {
		line("PVs: %v", err)
	} else {
		line("PVs:")
		for _, pv := range pvs {
			claim := ""
			if pv.Spec.ClaimRef != nil {
				claim = pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
			}
			line("  %s: phase %s claim %s handle %s capacity %s affinity %v", pv.Name, pv.Status.Phase, claim,
				pv.Spec.CSI.VolumeHandle, pv.Spec.Capacity.Storage(), pv.Spec.NodeAffinity)
		}
	}
	if vas, err := r.runAttachments(ctx); err != nil {
		line("VolumeAttachments: %v", err)
	} else {
		line("VolumeAttachments:")
		for _, va := range vas {
			line("  node %s pv %v: %s", va.Spec.NodeName, ptrString(va.Spec.Source.PersistentVolumeName), vaStatus(&va))
		}
	}
	if vss, err := r.dyn.Resource(volumeSnapshots).Namespace(r.ns).List(ctx, metav1.ListOptions{}); err != nil {
		line("VolumeSnapshots: %v", err)
	} else {
		line("VolumeSnapshots:")
		for _, vs := range vss.Items {
			line("  %s: %s", vs.GetName(), snapshotStatus(&vs))
		}
	}
	if r.cloud != nil {
		if vols, err := r.cloud.volumesOfNamespace(ctx, r.ns); err != nil {
			line("cloud volumes: %v", err)
		} else {
			line("cloud volumes of the namespace:")
			for _, v := range vols {
				line("  %s", v)
			}
		}
	}
	if r.host {
		if ms, err := leftoverMounts(r.nodes, r.ours); err == nil {
			line("mounts of the run:")
			for _, m := range ms {
				line("  %s", m)
			}
		}
		if loops, err := leftoverLoops(append([]string{env.cloudVolumesDir}, env.scope...), r.ours); err == nil {
			line("loop devices of the run:")
			for _, l := range loops {
				line("  %s -> %s", l.Name, l.Backing)
			}
		}
	}
	t.Log(b.String())
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.CreationTimestamp.Time
	}
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
