//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// scenarioBlock: a block-mode claim used by a pod through volumeDevices: the pod runs and kubelet had the driver
// publish the device for it, a block device of the requested size that is the cloud volume's device.
func scenarioBlock(t *testing.T, r *run) {
	if len(r.nodes) == 0 {
		t.Fatal("no node")
	}
	n := r.nodes[0]
	if len(r.nodesA) > 0 {
		n = r.nodesA[0]
	}
	const claim, size = "raw", 3 * gib
	r.createPVC(t, pvc(claim, r.ns, classExt4, size, true, ""))
	p := r.createPod(t, "raw", claim, n, true)
	_, pv := r.waitPVCBound(t, claim)
	requirePV(t, pv, n.Zone, "", true)
	r.waitAttached(t, pv.Name, n.Name)
	v := r.requireCloudVolume(t, pv.Spec.CSI.VolumeHandle, n.Zone, n.InstanceID)
	if r.cloud != nil && int64(v.SizeGiB)*gib != size {
		t.Fatalf("cloud volume %s is %d GiB, want %d", v.ID, v.SizeGiB, size/gib)
	}
	// The container has the device, of the volume's size, and what it writes there it reads back.
	out := strings.TrimSpace(r.mustExec(t, p.Name, nil, "blockdev", "--getsize64", blockDevicePath))
	if out != fmt.Sprint(size) {
		t.Fatalf("pod %s: blockdev --getsize64 %s = %q, want %d", p.Name, blockDevicePath, out, size)
	}
	d := r.writeBlock(t, p.Name)
	d.verifyBlock(t, r, p.Name)
	if !r.host {
		return
	}
	path := blockPublishPath(n, pv.Name, p.UID)
	waitFor(t, "block device published at "+path, func(context.Context) (bool, string, error) {
		got, err := blockDeviceSize(n, path)
		if err != nil {
			return false, "", err
		}
		if got != size {
			return false, "", permanent("%s is %d bytes, want %d", path, got, size)
		}
		return true, fmt.Sprintf("%d bytes", got), nil
	})
	if len(v.Attachments) == 1 && v.Attachments[0].HostDevice != "" {
		want, err := hostDeviceNumber(v.Attachments[0].HostDevice)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(onNode(n, path), &st); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)); got != want {
			t.Fatalf("%s is device %s, but the cloud volume is on %s (%s)", path, got, v.Attachments[0].HostDevice, want)
		}
		t.Logf("the published device is the cloud volume's device %s (%s)", v.Attachments[0].HostDevice, want)
	}
	if m, ok, err := mountAt(n, path); err == nil && ok {
		t.Logf("published by a bind mount from %s (%s)", m.source, m.fsType)
	}
	// kubelet holds the device open through a loop device of its own on the pod's device map; teardown checks it goes.
	loops, err := leftoverLoops([]string{n.RootDir}, func(p string) bool { return strings.Contains(p, pv.Name) })
	if err == nil {
		for _, l := range loops {
			t.Logf("kubelet's loop device %s -> %s", l.Name, l.Backing)
		}
	}
}
