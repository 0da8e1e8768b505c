package fakecloud_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func TestCreateVolumeValidation(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	tagSpec := func(rt types.ResourceType, k string) []types.TagSpecification {
		return []types.TagSpecification{{ResourceType: rt, Tags: []types.Tag{{Key: aws.String(k), Value: aws.String("v")}}}}
	}
	cases := []struct {
		name     string
		in       ec2.CreateVolumeInput
		code     string
		contains string
	}{
		{"no size or snapshot", ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA)}, "MissingParameter", "The request must contain the parameter size/snapshot"},
		{"no zone", ec2.CreateVolumeInput{Size: aws.Int32(1)}, "MissingParameter", "AvailabilityZone"},
		{"unknown zone", ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String("us-west-2a")}, "InvalidZone.NotFound", "The zone 'us-west-2a' does not exist."},
		{"zone and zone id", ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA), AvailabilityZoneId: aws.String("use1-az1")}, "InvalidParameterCombination", ""},
		{"unknown type", ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA), VolumeType: "gp9"}, "InvalidParameterValue", "volumeType"},
		{"io1 too small", ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(100)}, "InvalidParameterValue", "at least 4 GiB"},
		{"gp2 too large", ec2.CreateVolumeInput{Size: aws.Int32(16385), AvailabilityZone: aws.String(zoneA)}, "InvalidParameterValue", "maximum is 16384GiB"},
		{"st1 too small", ec2.CreateVolumeInput{Size: aws.Int32(100), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeSt1}, "InvalidParameterValue", "at least 125 GiB"},
		{"gp2 with iops", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), Iops: aws.Int32(300)}, "InvalidParameterCombination", "iops"},
		{"io2 without iops", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo2}, "InvalidParameterCombination", "The parameter iops must be specified for io2 volumes."},
		{"io1 iops max", ec2.CreateVolumeInput{Size: aws.Int32(2000), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(math.MaxInt32)}, "InvalidParameterValue", "maximum is 64000"},
		{"gp3 iops max", ec2.CreateVolumeInput{Size: aws.Int32(2000), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(200000)}, "InvalidParameterValue", "Volume iops of 200000 is too high; maximum is 80000"},
		{"io2 iops max", ec2.CreateVolumeInput{Size: aws.Int32(2000), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(math.MaxInt32)}, "InvalidParameterValue", "maximum is 256000"},
		{"io1 ratio", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(1000)}, "InvalidParameterValue", "ratio of 100 is too high; maximum is 50"},
		{"gp3 iops too low", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(100)}, "InvalidParameterValue", "minimum is 3000"},
		{"gp2 with throughput", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), Throughput: aws.Int32(200)}, "InvalidParameterCombination", "throughput"},
		{"gp3 throughput max", ec2.CreateVolumeInput{Size: aws.Int32(1000), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(16000), Throughput: aws.Int32(3000)}, "InvalidParameterValue", "maximum is 2000"},
		{"gp3 multi-attach", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeGp3, MultiAttachEnabled: aws.Bool(true)}, "InvalidParameterCombination", "Multi-Attach"},
		{"kms without encryption", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), KmsKeyId: aws.String("k")}, "InvalidParameterDependency", "Encrypted"},
		{"missing snapshot", ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), SnapshotId: aws.String("snap-0123456789abcdef0")}, "InvalidSnapshot.NotFound", "snap-0123456789abcdef0"},
		{"reserved tag", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), TagSpecifications: tagSpec(types.ResourceTypeVolume, "aws:x")}, "InvalidParameterValue", "reserved"},
		{"tag spec of other type", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), TagSpecifications: tagSpec(types.ResourceTypeInstance, "x")}, "InvalidParameterValue", "TagSpecification"},
		{"dry run valid", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), DryRun: aws.Bool(true)}, "DryRunOperation", "DryRun flag is set"},
		{"dry run validates first", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeIo1, Iops: aws.Int32(math.MaxInt32), DryRun: aws.Bool(true)}, "InvalidParameterValue", "maximum is 64000"},
		{"long client token", ec2.CreateVolumeInput{Size: aws.Int32(10), AvailabilityZone: aws.String(zoneA), ClientToken: aws.String(strings.Repeat("t", 65))}, "InvalidParameterValue", "clientToken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateVolume(context.Background(), &tc.in)
			if codeOf(err) != tc.code || !strings.Contains(messageOf(err), tc.contains) {
				t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.contains)
			}
		})
	}
	out, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{})
	if err != nil || len(out.Volumes) != 0 {
		t.Errorf("refused requests left volumes: %v, %v", out, err)
	}
}

func TestClientTokenIdempotency(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	in := func(size int32) *ec2.CreateVolumeInput {
		return &ec2.CreateVolumeInput{Size: aws.Int32(size), AvailabilityZone: aws.String(zoneA), ClientToken: aws.String("pvc-1234")}
	}
	first := createVolume(t, c, in(10))
	again := createVolume(t, c, in(10))
	if aws.ToString(first.VolumeId) != aws.ToString(again.VolumeId) {
		t.Errorf("same token gave %s and %s", aws.ToString(first.VolumeId), aws.ToString(again.VolumeId))
	}
	_, err := c.CreateVolume(ctx, in(11))
	if codeOf(err) != "IdempotentParameterMismatch" {
		t.Errorf("same token, other size: err = %v, want IdempotentParameterMismatch", err)
	}
	out, _ := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if len(out.Volumes) != 1 {
		t.Errorf("%d volumes, want 1", len(out.Volumes))
	}
}

// A reply lost after the volume was made (a 500 injected after the state change) is retried by the SDK with the
// same auto-filled ClientToken, so exactly one volume results.
func TestLostReplyRetriedWithClientToken(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateVolume": {Rate: 1, Code: "InternalError", Count: 2}}}})
	c := env.EC2(t)
	out := createVolume(t, c, &ec2.CreateVolumeInput{})
	vols, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vols.Volumes) != 1 || aws.ToString(vols.Volumes[0].VolumeId) != aws.ToString(out.VolumeId) {
		t.Errorf("after two lost replies: %d volumes, want only %s", len(vols.Volumes), aws.ToString(out.VolumeId))
	}
}

func TestAttachRules(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{
		{ID: "i-0a000000000000001", Zone: zoneA}, {ID: "i-0a000000000000002", Zone: zoneA},
		{ID: "i-0b000000000000001", Zone: zoneB}, {ID: "i-0a0000000000000ff", Zone: zoneA, AttachmentLimit: 1},
	}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	c := env.EC2(t)
	ctx := context.Background()
	a1, a2, b1, small := "i-0a000000000000001", "i-0a000000000000002", "i-0b000000000000001", "i-0a0000000000000ff"
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, vol, a1, "/dev/xvdba")
	spare := availableVolume(t, c, &ec2.CreateVolumeInput{})
	spare2 := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, spare2, small, "/dev/xvdba")

	cases := []struct {
		name, volume, instance, device, code, contains string
	}{
		{"zone mismatch", spare, b1, "/dev/xvdba", "InvalidVolume.ZoneMismatch", "is not in the same availability zone as instance"},
		{"missing instance", spare, "i-0ffffffffffffffff", "/dev/xvdba", "InvalidInstanceID.NotFound", "i-0ffffffffffffffff"},
		{"missing volume", "vol-0ffffffffffffffff", a1, "/dev/xvdbb", "InvalidVolume.NotFound", "The volume 'vol-0ffffffffffffffff' does not exist."},
		{"malformed volume", "disk-1", a1, "/dev/xvdbb", "InvalidVolumeID.Malformed", "disk-1"},
		{"bad device", spare, a1, "/dev/sdZZ", "InvalidParameterValue", "/dev/sdZZ is not a valid EBS device name."},
		{"device in use", spare, a1, "/dev/xvdba", "InvalidParameterValue", "Attachment point /dev/xvdba is already in use"},
		{"root device", spare, a1, "/dev/xvda", "InvalidParameterValue", "already in use"},
		{"already attached", vol, a2, "/dev/xvdbb", "VolumeInUse", "is already attached to an instance"},
		{"attachment limit", spare, small, "/dev/xvdbb", "AttachmentLimitExceeded", small},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &tc.volume, InstanceId: &tc.instance, Device: &tc.device})
			if codeOf(err) != tc.code || !strings.Contains(messageOf(err), tc.contains) {
				t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.contains)
			}
		})
	}

	detachCases := []struct {
		name     string
		in       ec2.DetachVolumeInput
		code     string
		contains string
	}{
		{"not attached", ec2.DetachVolumeInput{VolumeId: &spare}, "IncorrectState", "'available'"},
		{"other instance", ec2.DetachVolumeInput{VolumeId: &vol, InstanceId: &a2}, "InvalidAttachment.NotFound", a2},
	}
	for _, tc := range detachCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.DetachVolume(ctx, &tc.in)
			if codeOf(err) != tc.code || !strings.Contains(messageOf(err), tc.contains) {
				t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.contains)
			}
		})
	}

	_, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &vol})
	if codeOf(err) != "VolumeInUse" || !strings.Contains(messageOf(err), a1) {
		t.Errorf("delete in-use: err = %v", err)
	}
	_, err = c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String("vol-0ffffffffffffffff")})
	if codeOf(err) != "InvalidVolume.NotFound" {
		t.Errorf("delete missing: err = %v", err)
	}
	_, err = c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &spare, InstanceId: &a2, Device: aws.String("/dev/xvdbc"), DryRun: aws.Bool(true)})
	if codeOf(err) != "DryRunOperation" {
		t.Errorf("dry-run attach: err = %v", err)
	}
}

func TestMultiAttach(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{{ID: "i-0a000000000000001", Zone: zoneA}, {ID: "i-0a000000000000002", Zone: zoneA}}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(1000), MultiAttachEnabled: aws.Bool(true)})
	for _, inst := range []string{"i-0a000000000000001", "i-0a000000000000002"} {
		if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: aws.String(inst), Device: aws.String("/dev/xvdba")}); err != nil {
			t.Fatalf("attach to %s: %v", inst, err)
		}
	}
	_, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: aws.String("i-0a000000000000001"), Device: aws.String("/dev/xvdbb")})
	if codeOf(err) != "VolumeInUse" {
		t.Errorf("second attach to one instance: err = %v", err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "two attachments attached", func(ctx context.Context) (bool, error) {
		v := describeVolume(t, c, vol)
		return len(v.Attachments) == 2 && v.Attachments[0].State == types.VolumeAttachmentStateAttached && v.Attachments[1].State == types.VolumeAttachmentStateAttached, nil
	})
	_, err = c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &vol})
	if codeOf(err) != "InvalidParameterCombination" {
		t.Errorf("detach of multi-attached volume without instance: err = %v", err)
	}
	for _, inst := range []string{"i-0a000000000000001", "i-0a000000000000002"} {
		if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &vol, InstanceId: aws.String(inst)}); err != nil {
			t.Fatalf("detach from %s: %v", inst, err)
		}
	}
	waitDetached(t, c, vol)
}

func TestModificationRateLimit(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.ModificationLimit, cloud.ModificationWindow = 2, time.Hour
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	for size := int32(11); size <= 12; size++ {
		if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(size)}); err != nil {
			t.Fatalf("modification to %d: %v", size, err)
		}
		fakecloudtest.WaitFor(t, 10*time.Second, "modification done", func(ctx context.Context) (bool, error) {
			out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{vol}})
			return err == nil && out.VolumesModifications[0].ModificationState == types.VolumeModificationStateCompleted, err
		})
	}
	_, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(13)})
	if codeOf(err) != "VolumeModificationRateExceeded" {
		t.Errorf("third modification in the window: err = %v", err)
	}
}

func TestPagination(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	made := map[string]bool{}
	for range 23 {
		made[aws.ToString(createVolume(t, c, &ec2.CreateVolumeInput{}).VolumeId)] = true
	}
	seen := map[string]bool{}
	pages := 0
	p := ec2.NewDescribeVolumesPaginator(c, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(5)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(out.Volumes) > 5 {
			t.Errorf("page of %d volumes, want at most 5", len(out.Volumes))
		}
		for _, v := range out.Volumes {
			if seen[aws.ToString(v.VolumeId)] {
				t.Errorf("%s on two pages", aws.ToString(v.VolumeId))
			}
			seen[aws.ToString(v.VolumeId)] = true
		}
	}
	if len(seen) != len(made) || pages != 5 {
		t.Errorf("paged %d volumes in %d pages, want %d in 5", len(seen), pages, len(made))
	}
	all, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(1000)})
	if err != nil || len(all.Volumes) != 23 || all.NextToken != nil {
		t.Errorf("MaxResults above the maximum must clamp: %d volumes, token %v, err %v", len(all.Volumes), all.NextToken, err)
	}
	errCases := []struct {
		name string
		in   ec2.DescribeVolumesInput
		code string
	}{
		{"too small", ec2.DescribeVolumesInput{MaxResults: aws.Int32(3)}, "InvalidParameterValue"},
		{"with ids", ec2.DescribeVolumesInput{MaxResults: aws.Int32(5), VolumeIds: []string{"vol-0123456789abcdef0"}}, "InvalidVolume.NotFound"},
		{"bad token", ec2.DescribeVolumesInput{MaxResults: aws.Int32(5), NextToken: aws.String("not-a-token!")}, "InvalidPaginationToken"},
	}
	for _, tc := range errCases {
		if _, err := c.DescribeVolumes(ctx, &tc.in); codeOf(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
	var anyID string
	for id := range made {
		anyID = id
		break
	}
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(5), VolumeIds: []string{anyID}})
	if codeOf(err) != "InvalidParameterCombination" {
		t.Errorf("MaxResults with IDs: err = %v", err)
	}
}
