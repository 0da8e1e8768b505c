//go:build e2e

package scenarios

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scenarioIOFaults: fakecloud (on its fuse backend) fails every read of a pod's volume below the EC2 API; the
// pod's direct read of its data fails with an I/O error while its volume is still attached and mounted, and
// reads again once the fault is removed. kubelet asks for a volume's condition only through NodeGetVolumeStats
// (the alpha CSIVolumeHealth gate), which the driver answers without one since CSI 1.13 moved the condition to
// NodeGetVolumeHealth; the scenario logs the pod's events to show what, if anything, kubelet surfaced.
func scenarioIOFaults(t *testing.T, r *run) {
	if r.cloud == nil {
		t.Skip("needs fakecloud's admin API")
	}
	if len(r.nodes) == 0 {
		t.Fatal("no node")
	}
	n := r.nodes[0]
	if len(r.nodesA) > 0 {
		n = r.nodesA[0]
	}
	const claim, podName = "iofaults", "iofaults"
	r.createPVC(t, pvc(claim, r.ns, classExt4, gib, false, ""))
	p := r.createPod(t, podName, claim, n, false)
	_, pv := r.waitPVCBound(t, claim)
	v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
	d := r.writeData(t, p.Name, dataDir, "io-faults")
	// O_DIRECT, so the read reaches the device rather than the page cache that still holds what was written.
	read := []string{"dd", "if=" + dataDir + "/" + d.rel, "of=/dev/null", "bs=4096", "count=16", "iflag=direct"}
	r.mustExec(t, p.Name, nil, read...)

	rules, _ := json.Marshal(map[string]any{"rules": []map[string]any{{"volume": v.ID, "ops": []string{"read"}, "effect": "error", "errno": "EIO"}}})
	if _, err := r.cloud.putJSON(t.Context(), "/admin/io-faults", rules); err != nil {
		t.Fatalf("inject read errors (fakecloud needs --backend fuse): %v", err)
	}
	cleared := false
	clear := func(ctx context.Context) {
		if cleared {
			return
		}
		if _, err := r.cloud.admin(ctx, http.MethodDelete, "/admin/io-faults", nil); err != nil {
			t.Errorf("remove the I/O faults: %v", err)
			return
		}
		cleared = true
	}
	t.Cleanup(func() { clear(context.Background()) })

	out, err := r.execIn(t.Context(), p.Name, nil, read...)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "input/output error") {
		t.Fatalf("pod %s read its data with reads failing below the API: %q, %v; want an I/O error", p.Name, out, err)
	}
	t.Logf("pod %s's read fails: %v", p.Name, err)
	raw, err := r.cloud.get(t.Context(), "/admin/io-faults")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Rules []struct {
			Faulted int64 `json:"faulted"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(raw, &status); err != nil || len(status.Rules) != 1 || status.Rules[0].Faulted == 0 {
		t.Fatalf("fakecloud's fault counters: %s (%v)", raw, err)
	}
	t.Logf("fakecloud failed %d reads of %s", status.Rules[0].Faulted, v.ID)
	// What kubelet made of it: events on the pod (a VolumeConditionAbnormal event would come from kubelet's
	// volume health, were it asking NodeGetVolumeHealth).
	time.Sleep(5 * time.Second)
	evs, err := r.cs.CoreV1().Events(r.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + podName})
	if err == nil {
		for _, e := range evs.Items {
			t.Logf("event on %s: %s %s: %s", podName, e.Type, e.Reason, e.Message)
		}
	}

	clear(t.Context())
	waitFor(t, "reads of "+v.ID+" again after the fault is removed", func(ctx context.Context) (bool, string, error) {
		if _, err := r.execIn(ctx, p.Name, nil, read...); err != nil {
			return false, err.Error(), nil
		}
		return true, "read", nil
	})
	d.verifyIn(t, r, p.Name, dataDir)
	r.deletePod(t, podName)
}
