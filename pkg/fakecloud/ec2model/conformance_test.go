package ec2model_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestConformsToEC2Model drives every action fakecloud serves through the real SDK, records each exchange, and
// holds the requests, the parameter names fakecloud reads and its replies to EC2's published model.
func TestConformsToEC2Model(t *testing.T) {
	found := fakecloudtest.LocateModel(t)
	t.Logf("using %s (%s)", found.Package, found.Model.Path)
	model := found.Model

	rec := &fakecloudtest.Recorder{}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Recorder: rec})
	workload(t, env)

	served := env.Server.Handler.(interface{ Actions() []string }).Actions()
	exercised := fakecloudtest.CheckModel(t, found, rec)
	reads := rec.ParamsRead()
	for _, action := range served {
		switch {
		case !model.HasOperation(action) && fakecloudtest.NewerThanModel[action] != "":
			t.Logf("%s: not in %s's model (%s); not checked", action, found.Package, fakecloudtest.NewerThanModel[action])
		case !model.HasOperation(action):
			t.Errorf("%s: fakecloud serves it but EC2's model (%s) has no such operation", action, found.Package)
		case exercised[action] == 0:
			t.Errorf("%s: the workload never got a successful reply; add it to workload", action)
		default:
			t.Logf("%s: %d replies, %d parameter names read, checked", action, exercised[action], len(reads[action]))
		}
	}
}

// workload calls every action fakecloud serves at least once with success, with the parameters clients use.
func workload(t *testing.T, env *fakecloudtest.Env) {
	c := env.EC2(t)
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	zone, inst := "us-east-1a", fakecloudtest.InstanceA
	wait := func(what string, cond func(ctx context.Context) (bool, error)) {
		t.Helper()
		fakecloudtest.WaitFor(t, 10*time.Second, what, cond)
	}
	volumeState := func(id string, want types.VolumeState) {
		t.Helper()
		wait(id+" "+string(want), func(ctx context.Context) (bool, error) {
			out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
			return err == nil && len(out.Volumes) == 1 && out.Volumes[0].State == want, err
		})
	}
	tag := func(rt types.ResourceType, k, v string) []types.TagSpecification {
		return []types.TagSpecification{{ResourceType: rt, Tags: []types.Tag{{Key: aws.String(k), Value: aws.String(v)}}}}
	}

	_, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	must("DescribeAvailabilityZones", err)
	_, err = c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{zone},
		Filters: []types.Filter{{Name: aws.String("state"), Values: []string{"available"}}}})
	must("DescribeAvailabilityZones by name", err)
	_, err = c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{})
	must("DescribeInstanceTypes", err)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	must("DescribeInstances", err)

	gp3, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zone), Size: aws.Int32(10),
		VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(4000), Throughput: aws.Int32(200),
		ClientToken: aws.String("conformance-1"), TagSpecifications: tag(types.ResourceTypeVolume, "Name", "conformance")})
	must("CreateVolume gp3", err)
	vol := aws.ToString(gp3.VolumeId)
	io2, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZoneId: aws.String("use1-az1"), Size: aws.Int32(4),
		VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(1000), MultiAttachEnabled: aws.Bool(true), Encrypted: aws.Bool(true)})
	must("CreateVolume io2", err)
	volumeState(vol, types.VolumeStateAvailable)
	volumeState(aws.ToString(io2.VolumeId), types.VolumeStateAvailable)

	_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: []types.Tag{{Key: aws.String("team"), Value: aws.String("disks")}}})
	must("CreateTags", err)
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String("tag:team"), Values: []string{"disks"}}}})
	must("DescribeVolumes by tag", err)
	pages := ec2.NewDescribeVolumesPaginator(c, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(5)})
	for pages.HasMorePages() {
		_, err := pages.NextPage(ctx)
		must("DescribeVolumes pages", err)
	}
	tagPages := ec2.NewDescribeTagsPaginator(c, &ec2.DescribeTagsInput{MaxResults: aws.Int32(5),
		Filters: []types.Filter{{Name: aws.String("resource-type"), Values: []string{"volume"}}}})
	for tagPages.HasMorePages() {
		_, err := tagPages.NextPage(ctx)
		must("DescribeTags pages", err)
	}
	_, err = c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{vol}, Tags: []types.Tag{{Key: aws.String("team")}}})
	must("DeleteTags", err)
	_, err = c.ModifyVolumeAttribute(ctx, &ec2.ModifyVolumeAttributeInput{VolumeId: aws.String(vol), AutoEnableIO: &types.AttributeBooleanValue{Value: aws.Bool(true)}})
	must("ModifyVolumeAttribute", err)
	for _, attr := range []types.VolumeAttributeName{types.VolumeAttributeNameAutoEnableIO, types.VolumeAttributeNameProductCodes} {
		_, err = c.DescribeVolumeAttribute(ctx, &ec2.DescribeVolumeAttributeInput{VolumeId: aws.String(vol), Attribute: attr})
		must("DescribeVolumeAttribute "+string(attr), err)
	}

	_, err = c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(vol), InstanceId: aws.String(inst), Device: aws.String("/dev/xvdba")})
	must("AttachVolume", err)
	volumeState(vol, types.VolumeStateInUse)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst}})
	must("DescribeInstances attached", err)
	_, err = c.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: aws.String(inst),
		BlockDeviceMappings: []types.InstanceBlockDeviceMappingSpecification{{DeviceName: aws.String("/dev/xvdba"),
			Ebs: &types.EbsInstanceBlockDeviceSpecification{DeleteOnTermination: aws.Bool(false)}}}})
	must("ModifyInstanceAttribute", err)

	_, err = c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(vol), Size: aws.Int32(12), Iops: aws.Int32(5000)})
	must("ModifyVolume", err)
	wait("modification of "+vol, func(ctx context.Context) (bool, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{vol}})
		return err == nil && len(out.VolumesModifications) == 1 &&
			out.VolumesModifications[0].ModificationState != types.VolumeModificationStateModifying, err
	})

	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol), Description: aws.String("conformance"),
		TagSpecifications: tag(types.ResourceTypeSnapshot, "Name", "conformance")})
	must("CreateSnapshot", err)
	snapID := aws.ToString(snap.SnapshotId)
	wait("snapshot "+snapID, func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{snapID}, OwnerIds: []string{"self"}})
		return err == nil && len(out.Snapshots) == 1 && out.Snapshots[0].State == types.SnapshotStateCompleted, err
	})
	_, err = c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{MaxResults: aws.Int32(5),
		Filters: []types.Filter{{Name: aws.String("volume-id"), Values: []string{vol}}}})
	must("DescribeSnapshots by filter", err)

	_, err = c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{AvailabilityZones: []string{zone}, SourceSnapshotIds: []string{snapID}})
	must("EnableFastSnapshotRestores", err)
	_, err = c.DescribeFastSnapshotRestores(ctx, &ec2.DescribeFastSnapshotRestoresInput{
		Filters: []types.Filter{{Name: aws.String("snapshot-id"), Values: []string{snapID}}}})
	must("DescribeFastSnapshotRestores", err)
	restored, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zone), SnapshotId: aws.String(snapID),
		VolumeType: types.VolumeTypeGp3, VolumeInitializationRate: aws.Int32(200)})
	must("CreateVolume from a snapshot", err)
	volumeState(aws.ToString(restored.VolumeId), types.VolumeStateAvailable)
	_, err = c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{aws.ToString(restored.VolumeId), vol}})
	must("DescribeVolumeStatus", err)
	_, err = c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{MaxResults: aws.Int32(5)})
	must("DescribeVolumeStatus pages", err)
	_, err = c.DisableFastSnapshotRestores(ctx, &ec2.DisableFastSnapshotRestoresInput{AvailabilityZones: []string{zone}, SourceSnapshotIds: []string{snapID}})
	must("DisableFastSnapshotRestores", err)

	cp, err := c.CopyVolumes(ctx, &ec2.CopyVolumesInput{SourceVolumeId: aws.String(vol), ClientToken: aws.String("conformance-copy"),
		TagSpecifications: tag(types.ResourceTypeVolume, "Name", "copy")})
	must("CopyVolumes", err)
	for _, v := range cp.Volumes {
		volumeState(aws.ToString(v.VolumeId), types.VolumeStateAvailable)
	}
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	must("DescribeVolumes all", err)

	_, err = c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(vol), InstanceId: aws.String(inst)})
	must("DetachVolume", err)
	volumeState(vol, types.VolumeStateAvailable)
	_, err = c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{inst}})
	must("StopInstances", err)
	wait("instance stopped", instanceIs(c, inst, types.InstanceStateNameStopped))
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst}})
	must("DescribeInstances stopped", err)
	_, err = c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{inst}})
	must("StartInstances", err)
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{fakecloudtest.InstanceC}})
	must("TerminateInstances", err)
	_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("instance-state-name"),
		Values: []string{"shutting-down", "terminated"}}}})
	must("DescribeInstances terminated", err)
	launchWorkload(t, c, tag)

	snapshotWorkload(t, c, inst, snapID)
	accountWorkload(t, c)

	_, err = c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snapID)})
	must("DeleteSnapshot", err)
	for _, id := range []string{vol, aws.ToString(io2.VolumeId), aws.ToString(restored.VolumeId)} {
		_, err = c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(id)})
		must("DeleteVolume "+id, err)
	}
	// A DryRun that would succeed answers with an error; its request is checked all the same.
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{DryRun: aws.Bool(true)})
	if err == nil || !strings.Contains(err.Error(), "DryRunOperation") {
		t.Errorf("DescribeVolumes DryRun: %v, want DryRunOperation", err)
	}
}

// snapshotWorkload calls the snapshot actions beyond create, describe and delete on a copy of snapID.
func snapshotWorkload(t *testing.T, c *ec2.Client, inst, snapID string) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	cp, err := c.CopySnapshot(ctx, &ec2.CopySnapshotInput{SourceSnapshotId: aws.String(snapID), SourceRegion: aws.String("us-east-1"),
		Description: aws.String("copy")})
	must("CopySnapshot", err)
	copyID := aws.ToString(cp.SnapshotId)
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot "+copyID, func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{copyID}})
		return err == nil && len(out.Snapshots) == 1 && out.Snapshots[0].State == types.SnapshotStateCompleted, err
	})
	multi, err := c.CreateSnapshots(ctx, &ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String(inst)},
		Description: aws.String("multi")})
	must("CreateSnapshots", err)
	_, err = c.ModifySnapshotAttribute(ctx, &ec2.ModifySnapshotAttributeInput{SnapshotId: aws.String(copyID), Attribute: types.SnapshotAttributeNameCreateVolumePermission,
		CreateVolumePermission: &types.CreateVolumePermissionModifications{Add: []types.CreateVolumePermission{{UserId: aws.String("111122223333")}}}})
	must("ModifySnapshotAttribute", err)
	_, err = c.DescribeSnapshotAttribute(ctx, &ec2.DescribeSnapshotAttributeInput{SnapshotId: aws.String(copyID), Attribute: types.SnapshotAttributeNameCreateVolumePermission})
	must("DescribeSnapshotAttribute", err)
	_, err = c.ResetSnapshotAttribute(ctx, &ec2.ResetSnapshotAttributeInput{SnapshotId: aws.String(copyID), Attribute: types.SnapshotAttributeNameCreateVolumePermission})
	must("ResetSnapshotAttribute", err)
	_, err = c.LockSnapshot(ctx, &ec2.LockSnapshotInput{SnapshotId: aws.String(copyID), LockMode: types.LockModeGovernance, LockDuration: aws.Int32(1)})
	must("LockSnapshot", err)
	_, err = c.DescribeLockedSnapshots(ctx, &ec2.DescribeLockedSnapshotsInput{SnapshotIds: []string{copyID}})
	must("DescribeLockedSnapshots", err)
	_, err = c.UnlockSnapshot(ctx, &ec2.UnlockSnapshotInput{SnapshotId: aws.String(copyID)})
	must("UnlockSnapshot", err)
	_, err = c.ModifySnapshotTier(ctx, &ec2.ModifySnapshotTierInput{SnapshotId: aws.String(copyID), StorageTier: types.TargetStorageTierArchive})
	must("ModifySnapshotTier", err)
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot "+copyID+" archived", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshotTierStatus(ctx, &ec2.DescribeSnapshotTierStatusInput{
			Filters: []types.Filter{{Name: aws.String("snapshot-id"), Values: []string{copyID}}}})
		return err == nil && len(out.SnapshotTierStatuses) == 1 && out.SnapshotTierStatuses[0].StorageTier == types.StorageTierArchive, err
	})
	_, err = c.RestoreSnapshotTier(ctx, &ec2.RestoreSnapshotTierInput{SnapshotId: aws.String(copyID), TemporaryRestoreDays: aws.Int32(1)})
	must("RestoreSnapshotTier", err)
	for _, id := range append([]string{copyID}, snapshotIDs(multi.Snapshots)...) {
		_, err = c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(id)})
		must("DeleteSnapshot "+id, err)
	}
}

// launchWorkload launches an instance from the catalog with a root and a data volume, describes it running and
// terminates it.
func launchWorkload(t *testing.T, c *ec2.Client, tag func(types.ResourceType, string, string) []types.TagSpecification) {
	ctx := context.Background()
	images, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"amazon"},
		Filters: []types.Filter{{Name: aws.String("architecture"), Values: []string{"x86_64"}}}})
	if err != nil || len(images.Images) != 1 {
		t.Fatalf("DescribeImages: %v, %v", images, err)
	}
	run, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: images.Images[0].ImageId, InstanceType: types.InstanceTypeT3Medium,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), Placement: &types.Placement{AvailabilityZone: aws.String("us-east-1b")},
		BlockDeviceMappings: []types.BlockDeviceMapping{
			{DeviceName: aws.String("/dev/xvda"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(10), DeleteOnTermination: aws.Bool(true)}},
			{DeviceName: aws.String("/dev/sdf"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(4), VolumeType: types.VolumeTypeGp3,
				Iops: aws.Int32(3000), Throughput: aws.Int32(125), Encrypted: aws.Bool(true), DeleteOnTermination: aws.Bool(false)}},
		},
		TagSpecifications: append(tag(types.ResourceTypeInstance, "Name", "launched"), tag(types.ResourceTypeVolume, "by", "launch")...),
		ClientToken:       aws.String("conformance-launch")})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	id := aws.ToString(run.Instances[0].InstanceId)
	fakecloudtest.WaitFor(t, 10*time.Second, "launched instance running", instanceIs(c, id, types.InstanceStateNameRunning))
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("image-id"),
		Values: []string{aws.ToString(images.Images[0].ImageId)}}}}); err != nil {
		t.Fatalf("DescribeInstances launched: %v", err)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatalf("TerminateInstances launched: %v", err)
	}
}

func snapshotIDs(infos []types.SnapshotInfo) []string {
	var out []string
	for _, i := range infos {
		out = append(out, aws.ToString(i.SnapshotId))
	}
	return out
}

// accountWorkload calls the account's EBS encryption defaults actions, leaving them as they were.
func accountWorkload(t *testing.T, c *ec2.Client) {
	ctx := context.Background()
	steps := []struct {
		action string
		call   func() error
	}{
		{"GetEbsEncryptionByDefault", func() error {
			_, err := c.GetEbsEncryptionByDefault(ctx, &ec2.GetEbsEncryptionByDefaultInput{})
			return err
		}},
		{"EnableEbsEncryptionByDefault", func() error {
			_, err := c.EnableEbsEncryptionByDefault(ctx, &ec2.EnableEbsEncryptionByDefaultInput{})
			return err
		}},
		{"GetEbsDefaultKmsKeyId", func() error { _, err := c.GetEbsDefaultKmsKeyId(ctx, &ec2.GetEbsDefaultKmsKeyIdInput{}); return err }},
		{"ModifyEbsDefaultKmsKeyId", func() error {
			_, err := c.ModifyEbsDefaultKmsKeyId(ctx, &ec2.ModifyEbsDefaultKmsKeyIdInput{KmsKeyId: aws.String("alias/conformance")})
			return err
		}},
		{"ResetEbsDefaultKmsKeyId", func() error {
			_, err := c.ResetEbsDefaultKmsKeyId(ctx, &ec2.ResetEbsDefaultKmsKeyIdInput{})
			return err
		}},
		{"DisableEbsEncryptionByDefault", func() error {
			_, err := c.DisableEbsEncryptionByDefault(ctx, &ec2.DisableEbsEncryptionByDefaultInput{})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("%s: %v", s.action, err)
		}
	}
}

func instanceIs(c *ec2.Client, id string, want types.InstanceStateName) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if err != nil || len(out.Reservations) == 0 || len(out.Reservations[0].Instances) == 0 {
			return false, fmt.Errorf("describe %s: %v", id, err)
		}
		return out.Reservations[0].Instances[0].State.Name == want, nil
	}
}
