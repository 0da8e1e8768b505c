package fakecloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// TestRestart stops fakecloud mid-flight and starts it again on the same data directory: settled resources come
// back as they were, transitions in flight finish, and ClientTokens still dedupe.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	first := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c := first.EC2(t)
	ctx := context.Background()
	inst := first.Instances[zoneA]

	kept := availableVolume(t, c, &ec2.CreateVolumeInput{ClientToken: aws.String("keep"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}}})
	attached(t, c, kept, inst, "/dev/xvdba")
	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &kept})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	// The second life has slow transitions, so work started in it is still in flight when it stops.
	long := state.Durations{VolumeCreate: 300 * time.Millisecond, Modifying: 300 * time.Millisecond, Optimizing: 300 * time.Millisecond}
	second := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir, Durations: long})
	c = second.EC2(t)
	v := describeVolume(t, c, kept)
	if v.State != types.VolumeStateInUse || len(v.Attachments) != 1 || v.Attachments[0].State != types.VolumeAttachmentStateAttached ||
		aws.ToString(v.Attachments[0].Device) != "/dev/xvdba" || aws.ToString(v.Tags[0].Value) != "v" {
		t.Errorf("after restart volume = %+v", v)
	}
	// A copy the first life cut short runs again; the snapshot completes.
	waitSnapshot(t, c, aws.ToString(snap.SnapshotId), types.SnapshotStateCompleted)
	again := createVolume(t, c, &ec2.CreateVolumeInput{ClientToken: aws.String("keep"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}}})
	if aws.ToString(again.VolumeId) != kept {
		t.Errorf("ClientToken after restart made %s, want %s", aws.ToString(again.VolumeId), kept)
	}
	creating := aws.ToString(createVolume(t, c, &ec2.CreateVolumeInput{}).VolumeId)
	if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &kept, Size: aws.Int32(12)}); err != nil {
		t.Fatal(err)
	}
	second.Close()

	third := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir, Durations: long})
	c = third.EC2(t)
	if v := describeVolume(t, c, creating); v.State != types.VolumeStateCreating && v.State != types.VolumeStateAvailable {
		t.Errorf("volume created before the restart is %s", v.State)
	}
	waitVolume(t, c, creating, types.VolumeStateAvailable)
	fakecloudtest.WaitFor(t, 10*time.Second, "modification resumed", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{kept}})
		return err == nil && out.VolumesModifications[0].ModificationState == types.VolumeModificationStateCompleted, err
	})
	if v := describeVolume(t, c, kept); aws.ToInt32(v.Size) != 12 {
		t.Errorf("size after resumed modification = %d, want 12", aws.ToInt32(v.Size))
	}
}

// TestDetachReleasedButNotCommitted: fakecloud stops after a detach released the volume's device and before it
// recorded that. The next start does not bind the device again (the node would see its disk come back); it
// replays the detach, and the volume ends detached.
func TestDetachReleasedButNotCommitted(t *testing.T) {
	for _, backend := range []string{fakecloud.BackendFile, fakecloud.BackendLoop} {
		t.Run(backend, func(t *testing.T) {
			if backend == fakecloud.BackendLoop {
				requireLoop(t)
			}
			dir := t.TempDir()
			hooks := &hookedBackend{detached: newGate(t)}
			first := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir, Backend: backend, WrapBackend: hooks.wrap})
			c := first.EC2(t)
			vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
			// Whatever happens, the volume's device is released (by the backend under the hooks).
			t.Cleanup(func() { _ = hooks.Backend.Detach(context.Background(), vol, true) })
			attached(t, c, vol, first.Instances[zoneA], "/dev/xvdba")
			if _, err := c.DetachVolume(context.Background(), &ec2.DetachVolumeInput{VolumeId: &vol}); err != nil {
				t.Fatal(err)
			}
			hooks.detached.await(t) // released; the commit never comes
			first.Close()

			restarted := &hookedBackend{}
			second := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir, Backend: backend, WrapBackend: restarted.wrap})
			if restarted.boundAtStart(vol) {
				t.Errorf("the restart bound %s again although its detach had released it", vol)
			}
			waitDetached(t, second.EC2(t), vol)
			if dev := second.Server.Backend.DevicePath(vol); dev != "" {
				t.Errorf("detached volume %s still has device %s", vol, dev)
			}
		})
	}
}

// TestCallsDoNotWaitForBlockIO: a volume's file removal falls due and is held back; the unrelated call that finds
// it due, and every call meanwhile, are answered without waiting for it.
func TestCallsDoNotWaitForBlockIO(t *testing.T) {
	hooks := &hookedBackend{deletes: newGate(t)}
	clock := testutil.NewClock()
	// The transition loop would wake in an hour: the first call after the clock moves finds the removal due.
	env := fakecloudtest.Start(t, fakecloudtest.Options{WrapBackend: hooks.wrap, Clock: clock, Durations: state.Durations{VolumeDelete: time.Hour}})
	c := env.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	other := availableVolume(t, c, &ec2.CreateVolumeInput{})
	// Held I/O would hold these calls until the test ends: the deadline only turns that into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	clock.Advance(time.Hour)
	if _, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{other}}); err != nil {
		t.Fatalf("DescribeVolumes that found another volume's removal due: %v", err)
	}
	hooks.deletes.await(t)
	if _, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1)}); err != nil {
		t.Errorf("CreateVolume while another volume's file is being removed: %v", err)
	}
	if v := describeVolume(t, c, vol); v.State != types.VolumeStateDeleting {
		t.Errorf("volume whose file is being removed is %s, want deleting", v.State)
	}
	hooks.deletes.release()
	waitGone(t, c, vol)
}
