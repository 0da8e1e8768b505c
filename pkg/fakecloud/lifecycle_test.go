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

// slow makes every transition long enough to observe its intermediate state.
var slow = state.Durations{VolumeCreate: 150 * time.Millisecond, VolumeDelete: 150 * time.Millisecond, Attach: 150 * time.Millisecond,
	Detach: 150 * time.Millisecond, Modifying: 150 * time.Millisecond, Optimizing: 150 * time.Millisecond, Snapshot: 150 * time.Millisecond}

func TestVolumeLifecycle(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Durations: slow})
	c := env.EC2(t)
	ctx := context.Background()

	out := createVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(20), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(4000),
		Throughput: aws.Int32(250), Encrypted: aws.Bool(true), KmsKeyId: aws.String("arn:aws:kms:us-east-1:123456789012:key/k"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("Name"), Value: aws.String("data")}}}}})
	id := aws.ToString(out.VolumeId)
	if out.State != types.VolumeStateCreating {
		t.Errorf("CreateVolume state = %s, want creating", out.State)
	}
	v := waitVolume(t, c, id, types.VolumeStateAvailable)
	checks := []struct {
		name      string
		got, want any
	}{
		{"size", aws.ToInt32(v.Size), int32(20)},
		{"type", v.VolumeType, types.VolumeTypeGp3},
		{"iops", aws.ToInt32(v.Iops), int32(4000)},
		{"throughput", aws.ToInt32(v.Throughput), int32(250)},
		{"encrypted", aws.ToBool(v.Encrypted), true},
		{"kms", aws.ToString(v.KmsKeyId), "arn:aws:kms:us-east-1:123456789012:key/k"},
		{"zone", aws.ToString(v.AvailabilityZone), zoneA},
		{"zone id", aws.ToString(v.AvailabilityZoneId), "use1-az1"},
		{"tag", aws.ToString(v.Tags[0].Value), "data"},
		{"create time set", v.CreateTime != nil && !v.CreateTime.IsZero(), true},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	inst := env.Instances[zoneA]
	att, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &id, InstanceId: &inst, Device: aws.String("/dev/xvdba")})
	if err != nil {
		t.Fatalf("AttachVolume: %v", err)
	}
	if att.State != types.VolumeAttachmentStateAttaching {
		t.Errorf("AttachVolume state = %s, want attaching", att.State)
	}
	if v := describeVolume(t, c, id); v.State != types.VolumeStateInUse {
		t.Errorf("volume state while attaching = %s, want in-use", v.State)
	}
	waitAttachment(t, c, id, types.VolumeAttachmentStateAttached)

	insts, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst}})
	if err != nil {
		t.Fatalf("DescribeInstances: %v", err)
	}
	bdm := insts.Reservations[0].Instances[0].BlockDeviceMappings
	if len(bdm) != 1 || bdm[0].Ebs == nil || aws.ToString(bdm[0].Ebs.VolumeId) != id || aws.ToString(bdm[0].DeviceName) != "/dev/xvdba" {
		t.Errorf("block device mappings = %+v, want %s on /dev/xvdba with ebs", bdm, id)
	}
	if z := aws.ToString(insts.Reservations[0].Instances[0].Placement.AvailabilityZone); z != zoneA {
		t.Errorf("instance zone = %s", z)
	}

	det, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &id})
	if err != nil {
		t.Fatalf("DetachVolume: %v", err)
	}
	if det.State != types.VolumeAttachmentStateDetaching {
		t.Errorf("DetachVolume state = %s, want detaching", det.State)
	}
	waitDetached(t, c, id)

	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &id}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if v := describeVolume(t, c, id); v.State != types.VolumeStateDeleting {
		t.Errorf("state after DeleteVolume = %s, want deleting", v.State)
	}
	waitGone(t, c, id)
}

func TestModifyVolumeLifecycle(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Durations: slow})
	c := env.EC2(t)
	ctx := context.Background()
	id := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(10), VolumeType: types.VolumeTypeGp2})

	_, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{id}})
	if codeOf(err) != "InvalidVolumeModification.NotFound" {
		t.Fatalf("never-modified volume: err = %v, want InvalidVolumeModification.NotFound", err)
	}
	mod, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &id, Size: aws.Int32(30), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(5000)})
	if err != nil {
		t.Fatalf("ModifyVolume: %v", err)
	}
	m := mod.VolumeModification
	if m.ModificationState != types.VolumeModificationStateModifying || aws.ToInt32(m.TargetSize) != 30 || aws.ToInt32(m.OriginalSize) != 10 ||
		m.OriginalVolumeType != types.VolumeTypeGp2 || m.TargetVolumeType != types.VolumeTypeGp3 {
		t.Errorf("modification = %+v", m)
	}
	_, err = c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &id, Size: aws.Int32(40)})
	if codeOf(err) != "IncorrectModificationState" {
		t.Errorf("second modification: err = %v, want IncorrectModificationState", err)
	}
	seen := map[types.VolumeModificationState]bool{}
	fakecloudtest.WaitFor(t, 10*time.Second, "modification completed", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{id}})
		if err != nil {
			return false, err
		}
		st := out.VolumesModifications[0].ModificationState
		seen[st] = true
		return st == types.VolumeModificationStateCompleted, nil
	})
	if !seen[types.VolumeModificationStateOptimizing] {
		t.Errorf("never saw optimizing; saw %v", seen)
	}
	v := describeVolume(t, c, id)
	if aws.ToInt32(v.Size) != 30 || v.VolumeType != types.VolumeTypeGp3 || aws.ToInt32(v.Iops) != 5000 {
		t.Errorf("after modification volume = size %d type %s iops %d", aws.ToInt32(v.Size), v.VolumeType, aws.ToInt32(v.Iops))
	}
	_, err = c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &id, Size: aws.Int32(20)})
	if codeOf(err) != "InvalidParameterValue" || messageOf(err) != "New size cannot be smaller than existing size" {
		t.Errorf("shrink: err = %v", err)
	}
}

func TestSnapshotLifecycle(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Durations: slow})
	c := env.EC2(t)
	ctx := context.Background()
	id := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(8), Encrypted: aws.Bool(true)})

	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &id, Description: aws.String("nightly"),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}}})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	sid := aws.ToString(snap.SnapshotId)
	if snap.State != types.SnapshotStatePending || aws.ToInt32(snap.VolumeSize) != 8 || !aws.ToBool(snap.Encrypted) {
		t.Errorf("CreateSnapshot = state %s size %d encrypted %v", snap.State, aws.ToInt32(snap.VolumeSize), aws.ToBool(snap.Encrypted))
	}
	_, err = c.CreateVolume(ctx, &ec2.CreateVolumeInput{SnapshotId: &sid, AvailabilityZone: aws.String(zoneA)})
	if codeOf(err) != "IncorrectState" {
		t.Errorf("restore from pending snapshot: err = %v, want IncorrectState", err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot completed", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{sid}})
		if err != nil {
			return false, err
		}
		s := out.Snapshots[0]
		return s.State == types.SnapshotStateCompleted && aws.ToString(s.Progress) == "100%", nil
	})

	small, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{SnapshotId: &sid, Size: aws.Int32(4), AvailabilityZone: aws.String(zoneB)})
	if codeOf(err) != "InvalidParameterValue" {
		t.Errorf("restore smaller than snapshot: out %v err %v", small, err)
	}
	restored := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &sid, AvailabilityZone: aws.String(zoneB)})
	rv := describeVolume(t, c, restored)
	if aws.ToString(rv.SnapshotId) != sid || aws.ToInt32(rv.Size) != 8 || !aws.ToBool(rv.Encrypted) {
		t.Errorf("restored volume = snapshot %s size %d encrypted %v", aws.ToString(rv.SnapshotId), aws.ToInt32(rv.Size), aws.ToBool(rv.Encrypted))
	}

	byOwner, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"},
		Filters: []types.Filter{{Name: aws.String("tag:k"), Values: []string{"v"}}, {Name: aws.String("volume-id"), Values: []string{id}}}})
	if err != nil || len(byOwner.Snapshots) != 1 {
		t.Fatalf("DescribeSnapshots by owner and filter = %v, %v", byOwner, err)
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &sid}); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	_, err = c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{sid}})
	if codeOf(err) != "InvalidSnapshot.NotFound" || messageOf(err) != "The snapshot '"+sid+"' does not exist." {
		t.Errorf("deleted snapshot: err = %v", err)
	}
}

func TestTags(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	id := availableVolume(t, c, &ec2.CreateVolumeInput{})
	other := availableVolume(t, c, &ec2.CreateVolumeInput{})
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("team", "storage"), tag("env", "")}}); err != nil {
		t.Fatalf("CreateTags: %v", err)
	}
	filter := func(name string, values ...string) []string {
		out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String(name), Values: values}}})
		if err != nil {
			t.Fatalf("DescribeVolumes %s=%v: %v", name, values, err)
		}
		var ids []string
		for _, v := range out.Volumes {
			ids = append(ids, aws.ToString(v.VolumeId))
		}
		return ids
	}
	cases := []struct {
		name   string
		values []string
		want   int
	}{
		{"tag:team", []string{"storage"}, 1},
		{"tag:team", []string{"stor*"}, 1},
		{"tag:team", []string{"st?rage"}, 1},
		{"tag:team", []string{"compute"}, 0},
		{"tag-key", []string{"env"}, 1},
		{"volume-id", []string{id, other}, 2},
		{"status", []string{"available"}, 2},
		{"availability-zone", []string{zoneB}, 0},
	}
	for _, tc := range cases {
		if got := filter(tc.name, tc.values...); len(got) != tc.want {
			t.Errorf("filter %s=%v matched %v, want %d", tc.name, tc.values, got, tc.want)
		}
	}
	// A value that does not match keeps the tag; no value removes it whatever its value.
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("team", "other")}}); err != nil {
		t.Fatalf("DeleteTags: %v", err)
	}
	if len(filter("tag-key", "team")) != 1 {
		t.Errorf("DeleteTags with another value removed the tag")
	}
	if _, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("team")}}}); err != nil {
		t.Fatalf("DeleteTags: %v", err)
	}
	if len(filter("tag-key", "team")) != 0 {
		t.Errorf("DeleteTags without value kept the tag")
	}
	_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"vol-0000000000000dead"}, Tags: []types.Tag{tag("a", "b")}})
	if codeOf(err) != "InvalidVolume.NotFound" {
		t.Errorf("CreateTags on missing volume: %v", err)
	}
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{{Name: aws.String("colour"), Values: []string{"x"}}}})
	if codeOf(err) != "InvalidParameterValue" {
		t.Errorf("unknown filter: %v", err)
	}
}

func TestDescribeAvailabilityZones(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	out, err := c.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{})
	if err != nil || len(out.AvailabilityZones) != 3 {
		t.Fatalf("DescribeAvailabilityZones = %v, %v", out, err)
	}
	z := out.AvailabilityZones[1]
	if aws.ToString(z.ZoneName) != zoneB || aws.ToString(z.ZoneId) != "use1-az2" || aws.ToString(z.RegionName) != "us-east-1" || z.State != types.AvailabilityZoneStateAvailable {
		t.Errorf("zone = %+v", z)
	}
	one, err := c.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{zoneA}})
	if err != nil || len(one.AvailabilityZones) != 1 {
		t.Errorf("by name = %v, %v", one, err)
	}
	_, err = c.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1q"}})
	if codeOf(err) != "InvalidParameterValue" {
		t.Errorf("unknown zone: %v", err)
	}
}
