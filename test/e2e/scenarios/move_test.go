//go:build e2e

package scenarios

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

// scenarioMoveWithinZone: an ext4 claim first used on zone-a node 1 holds data; its pod is deleted and another one
// pinned to zone-a node 2 uses the claim: the volume is detached from node 1 (its VolumeAttachment goes, the mounts
// go), attached, staged and published on node 2, and the data is there.
func scenarioMoveWithinZone(t *testing.T, r *run) {
	r.needZones(t, 2, false)
	n1, n2 := r.nodesA[0], r.nodesA[1]
	const claim = "moving"
	r.createPVC(t, pvc(claim, r.ns, classExt4, 1*gib, false, ""))
	p1 := r.createPod(t, "moving-1", claim, n1, false)
	_, pv := r.waitPVCBound(t, claim)
	requirePV(t, pv, n1.Zone, "ext4", false)
	id := pv.Spec.CSI.VolumeHandle
	r.waitAttached(t, pv.Name, n1.Name)
	v := r.requireCloudVolume(t, id, n1.Zone, n1.InstanceID)
	if r.host {
		r.requirePodMount(t, n1, p1.UID, pv.Name, "ext4", v)
	}
	data := r.writeData(t, p1.Name, dataDir, fmt.Sprintf("diskforge e2e %s %s %s", r.ns, claim, time.Now().Format(time.RFC3339Nano)))

	r.deletePod(t, p1.Name)
	r.waitDetached(t, pv.Name, n1.Name)
	if r.host {
		waitFor(t, "no mount of "+pv.Name+" left on "+n1.Name, func(context.Context) (bool, string, error) {
			ms, err := leftoverMounts([]node{n1}, func(p string) bool {
				return strings.Contains(p, pv.Name) || strings.Contains(p, string(p1.UID)) ||
					strings.Contains(p, stagingDirName(id))
			})
			return len(ms) == 0, fmt.Sprint(ms), err
		})
	}
	if r.cloud != nil {
		waitFor(t, "cloud volume "+id+" detached", func(ctx context.Context) (bool, string, error) {
			v, ok, err := r.cloud.volume(ctx, id)
			if err != nil || !ok {
				return false, "not in /admin/volumes", err
			}
			return len(v.Attachments) == 0 && v.State == "available", v.String(), nil
		})
	}

	p2 := r.createPod(t, "moving-2", claim, n2, false)
	r.waitAttached(t, pv.Name, n2.Name)
	v = r.requireCloudVolume(t, id, n2.Zone, n2.InstanceID)
	moved := &podVolume{claim: claim, pv: pv.Name, volumeID: id, pod: p2, node: n2, fsType: "ext4"}
	if r.host {
		moved.mount = r.requirePodMount(t, n2, p2.UID, pv.Name, "ext4", v)
	}
	data.verifyIn(t, r, p2.Name, dataDir)
	moved.data = &data
	r.moved = moved
}

// stagingDirName is the directory kubelet stages a CSI volume in: the SHA-256 of its handle, below the driver's
// directory in plugins/kubernetes.io/csi.
func stagingDirName(volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return hex.EncodeToString(sum[:])
}
