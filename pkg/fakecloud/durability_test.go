package fakecloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

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
	if out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{aws.ToString(snap.SnapshotId)}}); err != nil || out.Snapshots[0].State != types.SnapshotStateCompleted {
		t.Errorf("snapshot after restart: %v %v", out, err)
	}
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
