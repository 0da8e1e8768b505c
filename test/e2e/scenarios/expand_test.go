//go:build e2e

package scenarios

import "testing"

// scenarioOnlineExpansion: scenario 1's xfs claim, in use by its running pod, is patched to a larger size: the PV and
// the cloud volume grow, kubelet grows the mounted filesystem (NodeExpandVolume) and the claim's status says so.
func scenarioOnlineExpansion(t *testing.T, r *run) {
	d := r.data
	if d == nil {
		t.Skip("needs scenario 1's volume in use (S1 failed or was not run)")
	}
	const size = 4 * gib
	r.resizePVC(t, d.claim, size)
	r.waitPVGrown(t, d.pv, d.volumeID, size)
	r.waitPVCCapacity(t, d.claim, size)
	if r.host {
		waitFSGrown(t, d.node, d.mount, size)
	}
	// The running container sees its filesystem grow, and its data intact.
	r.waitDFGrown(t, d.pod.Name, dataDir, size)
	if d.data != nil {
		d.data.verifyIn(t, r, d.pod.Name, dataDir)
	}
	r.waitPodRunning(t, d.pod.Name) // it never stopped
}

// scenarioOfflineExpansion: scenario 2's ext4 claim grows while no pod uses it; ext4 online growth may be refused
// by the kernel here, so the growth happens when the next pod's volume is staged. The data survives.
func scenarioOfflineExpansion(t *testing.T, r *run) {
	m := r.moved
	if m == nil {
		t.Skip("needs scenario 2's volume in use (S2 failed or was not run)")
	}
	r.moved = nil // from here on, whatever happens, its pod changes
	r.deletePod(t, m.pod.Name)
	r.waitDetached(t, m.pv, m.node.Name)
	const size = 2 * gib
	r.resizePVC(t, m.claim, size)
	r.waitPVGrown(t, m.pv, m.volumeID, size)

	p := r.createPod(t, "moving-3", m.claim, m.node, false)
	r.waitAttached(t, m.pv, m.node.Name)
	v := r.requireCloudVolume(t, m.volumeID, m.node.Zone, m.node.InstanceID)
	r.waitPVCCapacity(t, m.claim, size)
	if r.host {
		mount := r.requirePodMount(t, m.node, p.UID, m.pv, "ext4", v)
		waitFSGrown(t, m.node, mount, size)
	}
	r.waitDFGrown(t, p.Name, dataDir, size)
	if m.data != nil {
		m.data.verifyIn(t, r, p.Name, dataDir)
	}
}
