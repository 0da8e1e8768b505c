package driver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNodeRules drives the node's path and ownership rules on a fake machine (no root): stage, unstage,
// publish, unpublish, expand and stats refuse foreign mounts, other volumes' devices and mounts, and paths
// holding data, leaving them as they were; repeats of a done call succeed and change nothing. Volumes of
// every kind the node finds: loop (fakecloud), NVMe (Nitro), and a Xen device named by the publish context.
func TestNodeRules(t *testing.T) {
	t.Parallel()
	m := newFakeMachine(t)
	e := newFakeEnv(t, m)
	w := e.dir
	foreign := filepath.Join(w, "foreign")
	for _, d := range []string{filepath.Join(w, "emptydir"), filepath.Join(w, "etc"), foreign} {
		must(t, os.Mkdir(d, 0o755))
	}
	writeFile(t, filepath.Join(w, "file.txt"), "data that is not the volume's")
	writeFile(t, filepath.Join(w, "etc", "passwd"), "root:x:0:0")
	must(t, os.Symlink(filepath.Join(w, "etc"), filepath.Join(w, "link")))
	m.mountTmpfs(foreign)

	// A: loop, ext4, staged and published. B: loop, attached, never staged. K: loop, block, staged and
	// published. N: NVMe, xfs, staged. X: Xen, ext4, staged and published through the publish context's name.
	const (
		idA = "vol-0000000000000000a"
		idB = "vol-0000000000000000b"
		idK = "vol-0000000000000000c"
		idN = "vol-0000000000000000d"
		idX = "vol-0000000000000000e"
		idZ = "vol-0000000000000dead" // well-formed, not attached here
	)
	m.loopVolume(idA, 1, gib)
	m.loopVolume(idB, 2, gib)
	m.loopVolume(idK, 3, gib)
	devN := m.nvmeVolume(idN, 1, 2*gib)
	devX := m.xenDevice("ba", 3*gib)
	ext4, xfs, blk := mountCap("ext4", rwo), mountCap("xfs", rwo), blockCap(rwo)
	stA, tgA := filepath.Join(w, "stA"), filepath.Join(w, "tgA")
	stK, tgK := filepath.Join(w, "stK"), filepath.Join(w, "tgK")
	stN, stX, tgX := filepath.Join(w, "stN"), filepath.Join(w, "stX"), filepath.Join(w, "tgX")
	for _, d := range []string{stA, stK, stN, stX} {
		must(t, os.Mkdir(d, 0o750))
	}
	e.mustStage(idA, stA, ext4, nil)
	e.mustPublish(idA, stA, tgA, ext4, false)
	e.mustStage(idK, stK, blk, nil)
	e.mustPublish(idK, stK, tgK, blk, false)
	e.mustStage(idN, stN, xfs, nil)
	xenContext := map[string]string{PublishDevicePath: "/dev/xvdba", PublishVolumeSize: "3221225472"}
	stageX := func(staging string) func() error {
		return func() error {
			_, err := e.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: idX,
				StagingTargetPath: staging, VolumeCapability: ext4, PublishContext: xenContext})
			return err
		}
	}
	must(t, stageX(stX)())
	e.mustPublish(idX, stX, tgX, ext4, false)

	stage, publish, unstage, unpublish := e.stageCall, e.publishCall, e.unstageCall, e.unpublishCall
	expand, stats := e.expandCall, e.statsCall
	// mounts checks how many mounts path holds.
	mounts := func(path string, want int) func(t *testing.T) {
		return func(t *testing.T) {
			if got := len(m.mountsAt(path)); got != want {
				t.Errorf("%s holds %d mounts, want %d", path, got, want)
			}
		}
	}
	// healthy checks the volume's health at its paths: the reasons reported, none for a healthy volume.
	healthy := func(id, publish, staging string, reasons ...string) func() error {
		return func() error {
			resp, err := e.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: id,
				VolumePublishPath: publish, StagingTargetPath: staging})
			var got []string
			for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
				got = append(got, h.GetReason())
			}
			if err == nil && !slices.Equal(got, reasons) {
				t.Errorf("health of %s at %s, %s: %v, want %v", id, publish, staging, got, reasons)
			}
			return err
		}
	}
	t1, t5, t6 := filepath.Join(w, "t1"), filepath.Join(w, "t5"), filepath.Join(w, "t6")
	cases := []safetyCase{
		// Publish needs the staging path to be a mount of the volume's own device.
		{name: "publish from another volume's staging path", call: publish(idB, stA, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "publish from an unmounted directory", call: publish(idA, filepath.Join(w, "emptydir"), t1, ext4, false), want: codes.FailedPrecondition},
		{name: "publish from a foreign tmpfs", call: publish(idA, foreign, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "publish of a volume not attached here", call: publish(idZ, stA, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "publish from the Xen volume's staging path", call: publish(idA, stX, t1, ext4, false), want: codes.FailedPrecondition},
		{name: "block publish of a filesystem-staged volume", call: publish(idA, stA, t6, blk, false), want: codes.FailedPrecondition},
		{name: "mount publish of a block-staged volume", call: publish(idK, stK, t6, ext4, false), want: codes.FailedPrecondition},
		// Stage needs a path that is missing or an empty directory, and not another device's mount.
		{name: "stage on another volume's staging path", call: stage(idB, stA, ext4), want: codes.AlreadyExists, check: mounts(stA, 1)},
		{name: "stage on the Xen volume's staging path", call: stage(idB, stX, ext4), want: codes.AlreadyExists, check: mounts(stX, 1)},
		{name: "stage on a foreign mount", call: stage(idB, foreign, ext4), want: codes.AlreadyExists},
		{name: "stage on a directory with data", call: stage(idB, filepath.Join(w, "etc"), ext4), want: codes.AlreadyExists},
		{name: "stage on a symlink", call: stage(idB, filepath.Join(w, "link"), ext4), want: codes.AlreadyExists},
		{name: "block stage on a foreign mount", call: stage(idB, foreign, blk), want: codes.AlreadyExists},
		{name: "stage as xfs where ext4 is staged", call: stage(idA, stA, xfs), want: codes.AlreadyExists},
		{name: "stage the NVMe volume as ext4 (it holds xfs)", call: stage(idN, filepath.Join(w, "emptydir"), ext4), want: codes.FailedPrecondition},
		// Unstage and unpublish undo only the volume's own mounts.
		{name: "unstage from another volume's staging path", call: unstage(idB, stA), want: codes.FailedPrecondition, check: mounts(stA, 1)},
		{name: "unstage the Xen volume's staging path as another volume", call: unstage(idB, stX), want: codes.FailedPrecondition, check: mounts(stX, 1)},
		{name: "unstage of a foreign tmpfs", call: unstage(idA, foreign), want: codes.FailedPrecondition, check: mounts(foreign, 1)},
		{name: "unpublish of a foreign tmpfs", call: unpublish(idA, foreign), want: codes.FailedPrecondition, check: mounts(foreign, 1)},
		{name: "unpublish of another volume's target", call: unpublish(idB, tgA), want: codes.FailedPrecondition, check: mounts(tgA, 1)},
		{name: "unpublish of the Xen volume's target", call: unpublish(idA, tgX), want: codes.FailedPrecondition, check: mounts(tgX, 1)},
		{name: "unpublish of another volume's block target", call: unpublish(idA, tgK), want: codes.FailedPrecondition, check: mounts(tgK, 1)},
		{name: "unpublish of a regular file", call: unpublish(idA, filepath.Join(w, "file.txt")), want: codes.OK},
		{name: "unpublish of a directory with data", call: unpublish(idA, filepath.Join(w, "etc")), want: codes.OK},
		{name: "unpublish through a symlink", call: unpublish(idA, filepath.Join(w, "link")), want: codes.OK},
		{name: "unpublish of an empty directory not made by the driver", call: unpublish(idA, filepath.Join(w, "emptydir")), want: codes.OK},
		// Expand and stats act only on a path holding the volume.
		{name: "expand a foreign tmpfs", call: expand(idA, foreign, nil), want: codes.NotFound},
		{name: "expand another volume's target", call: expand(idB, tgA, nil), want: codes.NotFound},
		{name: "expand another volume's block target", call: expand(idA, tgK, nil), want: codes.NotFound},
		{name: "expand the Xen volume's target as another volume", call: expand(idA, tgX, nil), want: codes.NotFound},
		{name: "expand an unmounted directory", call: expand(idA, filepath.Join(w, "emptydir"), nil), want: codes.NotFound},
		{name: "stats of another volume's target", call: stats(idB, tgA), want: codes.NotFound},
		{name: "stats of a foreign tmpfs", call: stats(idA, foreign), want: codes.NotFound},
		{name: "stats of a block target for another volume", call: stats(idA, tgK), want: codes.NotFound},
		{name: "stats of the volume's target", call: stats(idA, tgA), want: codes.OK},
		{name: "stats of the NVMe volume's staging path", call: stats(idN, stN), want: codes.OK},
		{name: "stats of the Xen volume's target", call: stats(idX, tgX), want: codes.OK},
		{name: "stats of a block volume's target", call: stats(idK, tgK), want: codes.OK},
		// Health looks only at the volume's own mounts and device.
		{name: "health of the Xen volume", call: healthy(idX, tgX, stX), want: codes.OK},
		{name: "health of the NVMe volume", call: healthy(idN, "", stN), want: codes.OK},
		{name: "health at another volume's paths", call: healthy(idB, tgA, stA, "ForeignMount"), want: codes.OK},
		{name: "health at a foreign tmpfs", call: healthy(idA, foreign, "", "ForeignMount"), want: codes.OK},
		{name: "health of a volume not here", call: healthy(idZ, "", ""), want: codes.NotFound},
		// Publish needs a target that is missing or an empty mount point.
		{name: "publish to a directory with data", call: publish(idA, stA, filepath.Join(w, "etc"), ext4, false), want: codes.AlreadyExists},
		{name: "publish to a symlink", call: publish(idA, stA, filepath.Join(w, "link"), ext4, false), want: codes.AlreadyExists},
		{name: "publish to a regular file", call: publish(idA, stA, filepath.Join(w, "file.txt"), ext4, false), want: codes.AlreadyExists},
		{name: "publish to a foreign mount", call: publish(idA, stA, foreign, ext4, false), want: codes.AlreadyExists},
		{name: "publish to another volume's target", call: publish(idA, stA, tgK, ext4, false), want: codes.AlreadyExists},
		{name: "publish to the Xen volume's target", call: publish(idA, stA, tgX, ext4, false), want: codes.AlreadyExists},
		{name: "block publish to a directory with data", call: publish(idK, stK, filepath.Join(w, "etc"), blk, false), want: codes.AlreadyExists},
		{name: "publish under a missing parent", call: publish(idA, stA, filepath.Join(w, "nothere", "t"), ext4, false), want: codes.FailedPrecondition},
		// Repeats of a done call succeed and change nothing.
		{name: "stage again", call: stage(idA, stA, ext4), want: codes.OK, check: mounts(stA, 1)},
		{name: "stage the Xen volume again", call: stageX(stX), want: codes.OK, check: mounts(stX, 1)},
		{name: "block stage again", call: stage(idK, stK, blk), want: codes.OK, check: mounts(stK, 0)},
		{name: "publish again", call: publish(idA, stA, tgA, ext4, false), want: codes.OK, check: mounts(tgA, 1)},
		{name: "publish the Xen volume again", call: publish(idX, stX, tgX, ext4, false), want: codes.OK, check: mounts(tgX, 1)},
		{name: "block publish again", call: publish(idK, stK, tgK, blk, false), want: codes.OK, check: mounts(tgK, 1)},
		{name: "publish again read-only", call: publish(idA, stA, tgA, ext4, true), want: codes.AlreadyExists, check: mounts(tgA, 1)},
		// A fresh publication, read-only, and its undoing, twice.
		{name: "publish to a fresh target", call: publish(idA, stA, t5, ext4, true), want: codes.OK, own: []string{t5}, check: func(t *testing.T) {
			if mi := m.mountsAt(t5); len(mi) != 1 || !readOnlyMount(mi[0]) {
				t.Errorf("%s: %v, want one read-only mount", t5, mi)
			}
		}},
		{name: "unpublish the fresh target", call: unpublish(idA, t5), want: codes.OK, own: []string{t5}, check: gone(t5)},
		{name: "unpublish the fresh target again", call: unpublish(idA, t5), want: codes.OK, own: []string{t5}, check: gone(t5)},
	}
	runSafetyCases(t, cases, func() hostState { return snapshotHost(t, m, []string{w}, nil) })

	// The Xen volume grows: expand grows its filesystem, through the target and the staging path.
	m.resize(devX, 4*gib)
	resp, err := e.node.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: idX, VolumePath: tgX})
	if err != nil || resp.GetCapacityBytes() != 4*gib {
		t.Fatalf("expand the Xen volume = %v, %v; want %d bytes", resp, err, 4*gib)
	}
	// Undone in order, twice each: the Xen volume's record goes with its unstage, after which its device is no
	// longer the volume's, and its mounts no longer its own.
	for range 2 {
		e.mustUnpublish(idX, tgX)
		e.mustUnstage(idX, stX)
	}
	if _, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: idX, VolumePath: stX}); status.Code(err) != codes.NotFound {
		t.Errorf("stats of the unstaged Xen volume: %v, want NotFound", err)
	}
	if owns, err := e.node.devices.Owns(idX, devX.rdev); owns || err != nil {
		t.Errorf("Owns(Xen volume, its former device) = %v, %v after unstage; want false", owns, err)
	}
	for _, done := range []func(){func() { e.mustUnpublish(idA, tgA) }, func() { e.mustUnstage(idA, stA) },
		func() { e.mustUnpublish(idK, tgK) }, func() { e.mustUnstage(idK, stK) }, func() { e.mustUnstage(idN, stN) }} {
		done()
		done()
	}
	for _, p := range []string{stA, stK, stN, stX, tgA, tgK, tgX} {
		if mi := m.mountsAt(p); len(mi) != 0 {
			t.Errorf("%s still holds %v", p, mi)
		}
	}
	// Only the foreign tmpfs is left; each device was formatted once at most.
	if all, _ := m.mounts(nil); len(all) != 1 || all[0].FSType != "tmpfs" {
		t.Errorf("mount table at the end: %v", all)
	}
	if mkfs, want := m.ranMkfs(), []string{m.devDir + "/loop1", devN.node, devX.node}; !slices.Equal(mkfs, want) {
		t.Errorf("mkfs ran on %v, want once on each of %v", mkfs, want)
	}
}
