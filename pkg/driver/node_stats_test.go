package driver

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func health(t *testing.T, e *nodeEnv, id, publish, staging string) ([]string, error) {
	t.Helper()
	resp, err := e.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: id,
		VolumePublishPath: publish, StagingTargetPath: staging})
	if err != nil {
		return nil, err
	}
	if resp.GetVolumeHealth().GetVolumeId() != id {
		t.Fatalf("health names volume %q, want %q", resp.GetVolumeHealth().GetVolumeId(), id)
	}
	var reasons []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		if h.GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE || h.GetMessage() == "" {
			t.Errorf("health entry %v", h)
		}
		reasons = append(reasons, h.GetReason())
	}
	return reasons, nil
}

func usage(t *testing.T, resp *csi.NodeGetVolumeStatsResponse, unit csi.VolumeUsage_Unit) *csi.VolumeUsage {
	t.Helper()
	for _, u := range resp.GetUsage() {
		if u.GetUnit() == unit {
			return u
		}
	}
	t.Fatalf("no %s usage in %v", unit, resp)
	return nil
}

// TestNodeStatsAndHealth: stats of a mounted filesystem, health while everything is in place, then after the
// instance lets go of the device while it is still mounted (a forced detach), then after it is unmounted.
func TestNodeStatsAndHealth(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	id, _ := e.volume(ext4Size, nil)
	vc := mountCap("ext4", rwo)
	staging, target := e.path("staging"), e.path("target")
	e.mustStage(id, staging, vc, nil)
	e.mustPublish(id, staging, target, vc, false)
	writeFile(t, target+"/f", "some data")

	for _, path := range []string{target, staging} {
		resp, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
		if err != nil {
			t.Fatalf("stats of %s: %v", path, err)
		}
		b, i := usage(t, resp, csi.VolumeUsage_BYTES), usage(t, resp, csi.VolumeUsage_INODES)
		if b.GetTotal() != statfsTotal(t, path) || b.GetUsed() <= 0 || b.GetAvailable() <= 0 || b.GetUsed()+b.GetAvailable() > b.GetTotal() {
			t.Errorf("bytes usage of %s: %v", path, b)
		}
		if i.GetTotal() <= 0 || i.GetUsed() < 12 || i.GetUsed()+i.GetAvailable() != i.GetTotal() {
			t.Errorf("inode usage of %s: %v", path, i)
		}
	}

	for _, paths := range [][2]string{{target, staging}, {"", ""}, {target, ""}, {"", staging}} {
		reasons, err := health(t, e, id, paths[0], paths[1])
		if err != nil || len(reasons) != 0 {
			t.Fatalf("health with paths %q: %v, %v; want healthy", paths, reasons, err)
		}
	}
	other := e.path("other")
	if err := os.MkdirAll(other, 0o750); err != nil {
		t.Fatal(err)
	}
	if reasons, err := health(t, e, id, other, staging); err != nil || !slices.Equal(reasons, []string{"NotPublished"}) {
		t.Fatalf("health at an unmounted publish path: %v, %v", reasons, err)
	}

	// A forced detach of a mounted loop device is deferred until the last unmount; the node sees it pending.
	if err := e.backend.Detach(context.Background(), id, true); err != nil {
		t.Fatal(err)
	}
	if reasons, err := health(t, e, id, target, staging); err != nil || !slices.Equal(reasons, []string{"DetachPending"}) {
		t.Fatalf("health after a forced detach: %v, %v; want DetachPending", reasons, err)
	}
	e.mustUnpublish(id, target)
	e.mustUnstage(id, staging)

	_, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	wantCode(t, err, codes.NotFound, "stats of an unpublished target")
	_, err = e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: staging})
	wantCode(t, err, codes.NotFound, "stats of an unmounted staging path")
	// Unmounted, the device has gone with its detach. Asked about its staging path, which is still there, the
	// node reports the device missing; asked without paths, the volume is nowhere on this node.
	if reasons, err := health(t, e, id, "", staging); err != nil || !slices.Equal(reasons, []string{"DeviceMissing"}) {
		t.Fatalf("health of a detached volume at its staging path: %v, %v; want DeviceMissing", reasons, err)
	}
	_, err = health(t, e, id, "", "")
	wantCode(t, err, codes.NotFound, "health of a detached, unmounted volume")
}

// TestNodeBlockStats: a published block volume reports its device's size.
func TestNodeBlockStats(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	id, _ := e.volume(ext4Size, nil)
	vc := blockCap(rwo)
	staging, target := e.path("staging"), e.path("target")
	e.mustStage(id, staging, vc, nil)
	e.mustPublish(id, staging, target, vc, false)
	resp, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if b := usage(t, resp, csi.VolumeUsage_BYTES); b.GetTotal() != ext4Size {
		t.Fatalf("block usage %v, want total %d", b, ext4Size)
	}
	if reasons, err := health(t, e, id, target, staging); err != nil || len(reasons) != 0 {
		t.Fatalf("health of a published block volume: %v, %v", reasons, err)
	}
	e.mustUnpublish(id, target)
	if reasons, err := health(t, e, id, target, staging); err != nil || !slices.Equal(reasons, []string{"NotPublished"}) {
		t.Fatalf("health of an unpublished block volume: %v, %v", reasons, err)
	}
	e.mustUnstage(id, staging)
}
