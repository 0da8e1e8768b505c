package fakecloud_test

import (
	"context"
	"io"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// The catalog's images, as state.Images lists them.
const (
	amiX86   = "ami-0fa4ec1000000a864"
	amiArm64 = "ami-0fa4ec1000000a064"
)

func tagSpec(rt types.ResourceType, k, v string) types.TagSpecification {
	return types.TagSpecification{ResourceType: rt, Tags: []types.Tag{{Key: aws.String(k), Value: aws.String(v)}}}
}

// launchVolumes are the volumes attached to an instance, by device.
func launchVolumes(t *testing.T, c *ec2.Client, instanceID string) map[string]types.Volume {
	t.Helper()
	out, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{instanceID}}}})
	if err != nil {
		t.Fatalf("DescribeVolumes of %s: %v", instanceID, err)
	}
	byDevice := map[string]types.Volume{}
	for _, v := range out.Volumes {
		byDevice[aws.ToString(v.Attachments[0].Device)] = v
	}
	return byDevice
}

// TestRunInstancesSDK: a launch makes pending instances of one reservation that go running, each with its root
// volume (the image's, resized) and a data volume made and attached, shown by DescribeVolumes, DescribeInstances
// and the instance metadata; termination deletes the DeleteOnTermination volumes and leaves the others available.
func TestRunInstancesSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(amiX86), InstanceType: types.InstanceTypeM5Large, MinCount: aws.Int32(2), MaxCount: aws.Int32(2),
		Placement: &types.Placement{AvailabilityZone: aws.String(zoneB)},
		BlockDeviceMappings: []types.BlockDeviceMapping{
			{DeviceName: aws.String("/dev/xvda"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(12)}},
			{DeviceName: aws.String("/dev/sdf"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(5), VolumeType: types.VolumeTypeIo2,
				Iops: aws.Int32(500), DeleteOnTermination: aws.Bool(false)}},
			{DeviceName: aws.String("/dev/sdg"), NoDevice: aws.String("")},
		},
		TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeInstance, "role", "worker"),
			tagSpec(types.ResourceTypeVolume, "owner", "test")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Instances) != 2 || aws.ToString(out.ReservationId) == "" || aws.ToString(out.OwnerId) == "" {
		t.Fatalf("reservation %s of %s: %d instances", aws.ToString(out.ReservationId), aws.ToString(out.OwnerId), len(out.Instances))
	}
	var ids []string
	for i, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
		if in.State.Name != types.InstanceStateNamePending || aws.ToInt32(in.State.Code) != 0 || aws.ToInt32(in.AmiLaunchIndex) != int32(i) ||
			aws.ToString(in.ImageId) != amiX86 || in.InstanceType != types.InstanceTypeM5Large ||
			aws.ToString(in.Placement.AvailabilityZone) != zoneB || in.Architecture != types.ArchitectureValuesX8664 {
			t.Errorf("launched instance %d: %+v", i, in)
		}
	}
	for _, id := range ids {
		in := waitInstance(t, c, id, types.InstanceStateNameRunning)
		if len(in.Tags) != 1 || aws.ToString(in.Tags[0].Key) != "role" {
			t.Errorf("%s: tags %+v", id, in.Tags)
		}
		vols := launchVolumes(t, c, id)
		root, data := vols["/dev/xvda"], vols["/dev/sdf"]
		if len(vols) != 2 || aws.ToInt32(root.Size) != 12 || root.VolumeType != types.VolumeTypeGp3 ||
			!aws.ToBool(root.Attachments[0].DeleteOnTermination) || aws.ToString(root.AvailabilityZone) != zoneB {
			t.Fatalf("%s: volumes %+v", id, vols)
		}
		if aws.ToInt32(data.Size) != 5 || data.VolumeType != types.VolumeTypeIo2 || aws.ToInt32(data.Iops) != 500 ||
			aws.ToBool(data.Attachments[0].DeleteOnTermination) || len(data.Tags) != 1 || aws.ToString(data.Tags[0].Value) != "test" {
			t.Errorf("%s: data volume %+v", id, data)
		}
		in = describeInstance(t, c, id)
		var devices []string
		for _, m := range in.BlockDeviceMappings {
			devices = append(devices, aws.ToString(m.DeviceName))
		}
		slices.Sort(devices)
		if !slices.Equal(devices, []string{"/dev/sdf", "/dev/xvda"}) {
			t.Errorf("%s: DescribeInstances' block device mapping %v", id, devices)
		}
	}
	// Both instances of one launch are one reservation.
	desc, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if err != nil || len(desc.Reservations) != 1 || len(desc.Reservations[0].Instances) != 2 ||
		aws.ToString(desc.Reservations[0].ReservationId) != aws.ToString(out.ReservationId) {
		t.Errorf("DescribeInstances of the launch: %+v, %v", desc, err)
	}

	// The metadata lists the data volume as of the start, the root as ami and root.
	meta := imds.New(imds.Options{Endpoint: env.IMDS(t, ids[0])})
	for path, want := range map[string]string{"ami-id": amiX86, "block-device-mapping/": "ami\nebs1\nroot",
		"block-device-mapping/ebs1": "sdf", "block-device-mapping/root": "/dev/xvda", "placement/availability-zone": zoneB} {
		got, err := meta.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
		if err != nil {
			t.Errorf("metadata %s: %v", path, err)
			continue
		}
		body, _ := io.ReadAll(got.Content)
		if string(body) != want {
			t.Errorf("metadata %s = %q, want %q", path, body, want)
		}
	}

	vols := launchVolumes(t, c, ids[0])
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{ids[0]}}); err != nil {
		t.Fatal(err)
	}
	waitInstance(t, c, ids[0], types.InstanceStateNameTerminated)
	waitGone(t, c, aws.ToString(vols["/dev/xvda"].VolumeId))
	waitDetached(t, c, aws.ToString(vols["/dev/sdf"].VolumeId))
}

// TestRunInstancesIdempotencySDK: a ClientToken answers its reservation again without launching more; the same
// token with other parameters is IdempotentParameterMismatch; DryRun checks and launches nothing.
func TestRunInstancesIdempotencySDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	run := func(token, typ string, dry bool) (*ec2.RunInstancesOutput, error) {
		return c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(amiX86), InstanceType: types.InstanceType(typ),
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ClientToken: aws.String(token), DryRun: aws.Bool(dry)})
	}
	if _, err := run("tok-1", "t3.medium", true); codeOf(err) != "DryRunOperation" {
		t.Fatalf("DryRun: %v", err)
	}
	if _, err := run("tok-1", "t3.mdium", true); codeOf(err) != "InvalidParameterValue" {
		t.Errorf("DryRun of a bad type: %v", err)
	}
	if got := instancesNamed(t, c, "image-id", amiX86); len(got) != 0 {
		t.Fatalf("DryRun launched %v", got)
	}
	first, err := run("tok-1", "t3.medium", false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := run("tok-1", "t3.medium", false)
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(again.ReservationId) != aws.ToString(first.ReservationId) ||
		aws.ToString(again.Instances[0].InstanceId) != aws.ToString(first.Instances[0].InstanceId) {
		t.Errorf("retry answered %s/%s, want %s/%s", aws.ToString(again.ReservationId), aws.ToString(again.Instances[0].InstanceId),
			aws.ToString(first.ReservationId), aws.ToString(first.Instances[0].InstanceId))
	}
	if aws.ToString(again.Instances[0].ClientToken) != "tok-1" {
		t.Errorf("clientToken %q", aws.ToString(again.Instances[0].ClientToken))
	}
	if _, err := run("tok-1", "t3.large", false); codeOf(err) != "IdempotentParameterMismatch" {
		t.Errorf("same token, other type: %v", err)
	}
	if got := instancesNamed(t, c, "image-id", amiX86); len(got) != 1 {
		t.Errorf("instances of the image: %v, want one", got)
	}
	if got := instancesNamed(t, c, "client-token", "tok-1"); len(got) != 1 {
		t.Errorf("client-token filter: %v", got)
	}
}

// TestRunInstancesErrorsSDK: EC2's answers to bad launches, which launch nothing.
func TestRunInstancesErrorsSDK(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: zoneA}}
	// The registered m5.large takes 2 of 10 vCPUs: four more m5.large fit.
	cloud.VcpuLimit = 10
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	c := env.EC2(t)
	ctx := context.Background()
	base := func() *ec2.RunInstancesInput {
		return &ec2.RunInstancesInput{ImageId: aws.String(amiX86), InstanceType: types.InstanceTypeM5Large, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
	}
	bdm := func(in *ec2.RunInstancesInput, m ...types.BlockDeviceMapping) *ec2.RunInstancesInput {
		in.BlockDeviceMappings = m
		return in
	}
	with := func(f func(*ec2.RunInstancesInput)) *ec2.RunInstancesInput { in := base(); f(in); return in }
	manyData := base()
	for _, d := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "ba", "bb"} {
		manyData.BlockDeviceMappings = append(manyData.BlockDeviceMappings,
			types.BlockDeviceMapping{DeviceName: aws.String("/dev/xvd" + d), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(1)}})
	}
	for _, tc := range []struct {
		name string
		in   *ec2.RunInstancesInput
		code string
	}{
		{"unknown image", with(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0123456789abcdef0") }), "InvalidAMIID.NotFound"},
		{"malformed image", with(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("image-1") }), "InvalidAMIID.Malformed"},
		{"unknown type", with(func(in *ec2.RunInstancesInput) { in.InstanceType = "m5.huge" }), "InvalidParameterValue"},
		{"arm64 image on x86_64 type", with(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String(amiArm64) }), "InvalidParameterValue"},
		{"more than fit", with(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(5), aws.Int32(8) }), "VcpuLimitExceeded"},
		{"min above max", with(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(3), aws.Int32(2) }), "InvalidParameterValue"},
		{"no count", with(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(0), aws.Int32(1) }), "InvalidParameterValue"},
		{"unknown zone", with(func(in *ec2.RunInstancesInput) {
			in.Placement = &types.Placement{AvailabilityZone: aws.String("us-east-1z")}
		}), "InvalidZone.NotFound"},
		{"subnet", with(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String("subnet-0123456789abcdef0") }), "InvalidSubnetID.NotFound"},
		{"root below the image's", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/xvda"),
			Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(4)}}), "InvalidBlockDeviceMapping"},
		{"root suppressed", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/xvda"), NoDevice: aws.String("")}), "InvalidBlockDeviceMapping"},
		{"bad device name", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/hda"),
			Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(1)}}), "InvalidBlockDeviceMapping"},
		{"data volume without size", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/sdf"),
			Ebs: &types.EbsBlockDevice{VolumeType: types.VolumeTypeGp3}}), "MissingParameter"},
		{"data volume too small", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/sdf"),
			Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(1), VolumeType: types.VolumeTypeSt1}}), "InvalidParameterValue"},
		{"unknown snapshot", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/sdf"),
			Ebs: &types.EbsBlockDevice{SnapshotId: aws.String("snap-0123456789abcdef0")}}), "InvalidSnapshot.NotFound"},
		{"past the attachment limit", manyData, "AttachmentLimitExceeded"},
		{"instance store", bdm(base(), types.BlockDeviceMapping{DeviceName: aws.String("/dev/sdb"), VirtualName: aws.String("ephemeral0")}), "UnsupportedOperation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.RunInstances(ctx, tc.in); codeOf(err) != tc.code {
				t.Errorf("got %v, want %s", err, tc.code)
			}
		})
	}
	if got := instancesNamed(t, c, "instance-state-name", "pending", "running"); !slices.Equal(got, []string{fakecloudtest.InstanceA}) {
		t.Fatalf("failed launches left instances: %v", got)
	}
	if out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{}); err != nil || len(out.Volumes) != 0 {
		t.Fatalf("failed launches left volumes: %+v, %v", out, err)
	}

	// MaxCount past the limit launches what fits; the default type is m1.small (1 vCPU).
	out, err := c.RunInstances(ctx, with(func(in *ec2.RunInstancesInput) { in.MinCount, in.MaxCount = aws.Int32(2), aws.Int32(9) }))
	if err != nil || len(out.Instances) != 4 {
		t.Fatalf("MaxCount 9 with room for 4: %v, %v", out, err)
	}
	out, err = c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(amiX86), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if codeOf(err) != "VcpuLimitExceeded" {
		t.Fatalf("no room left: %v, %v", out, err)
	}
}

// TestRunInstancesDefaultsSDK: without a type, zone or mapping, EC2's defaults: m1.small in the region's first
// zone with the image's root volume alone; an arm64 image runs on a Graviton type.
func TestRunInstancesDefaultsSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(amiX86), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	in := waitInstance(t, c, id, types.InstanceStateNameRunning)
	if in.InstanceType != types.InstanceTypeM1Small || aws.ToString(in.Placement.AvailabilityZone) != zoneA {
		t.Errorf("defaults: %s in %s", in.InstanceType, aws.ToString(in.Placement.AvailabilityZone))
	}
	vols := launchVolumes(t, c, id)
	if root := vols["/dev/xvda"]; len(vols) != 1 || aws.ToInt32(root.Size) != 8 || root.VolumeType != types.VolumeTypeGp3 {
		t.Errorf("default volumes %+v", vols)
	}
	arm, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(amiArm64), InstanceType: types.InstanceTypeM6gLarge,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), Placement: &types.Placement{AvailabilityZoneId: aws.String("use1-az4")}})
	if err != nil {
		t.Fatal(err)
	}
	if a := arm.Instances[0]; a.Architecture != types.ArchitectureValuesArm64 || aws.ToString(a.Placement.AvailabilityZone) != "us-east-1c" {
		t.Errorf("arm64 launch: %s in %s", a.Architecture, aws.ToString(a.Placement.AvailabilityZone))
	}
}

// TestDescribeImagesSDK: the built-in catalog, by ID, owner and filter.
func TestDescribeImagesSDK(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	filter := func(name string, values ...string) []types.Filter {
		return []types.Filter{{Name: aws.String(name), Values: values}}
	}
	for _, tc := range []struct {
		name string
		in   *ec2.DescribeImagesInput
		want []string
		code string
	}{
		{"all", &ec2.DescribeImagesInput{}, []string{amiArm64, amiX86}, ""},
		{"by ID", &ec2.DescribeImagesInput{ImageIds: []string{amiArm64}}, []string{amiArm64}, ""},
		{"architecture", &ec2.DescribeImagesInput{Filters: filter("architecture", "x86_64")}, []string{amiX86}, ""},
		{"name wildcard", &ec2.DescribeImagesInput{Filters: filter("name", "*arm64")}, []string{amiArm64}, ""},
		{"owner amazon", &ec2.DescribeImagesInput{Owners: []string{"amazon"}}, []string{amiArm64, amiX86}, ""},
		{"owner self", &ec2.DescribeImagesInput{Owners: []string{"self"}}, nil, ""},
		{"owner-alias", &ec2.DescribeImagesInput{Filters: filter("owner-alias", "amazon")}, []string{amiArm64, amiX86}, ""},
		{"state and root device", &ec2.DescribeImagesInput{Filters: append(filter("state", "available"), filter("root-device-type", "ebs")...)},
			[]string{amiArm64, amiX86}, ""},
		{"unknown ID", &ec2.DescribeImagesInput{ImageIds: []string{"ami-0123456789abcdef0"}}, nil, "InvalidAMIID.NotFound"},
		{"malformed ID", &ec2.DescribeImagesInput{ImageIds: []string{"img-1"}}, nil, "InvalidAMIID.Malformed"},
		{"unknown filter", &ec2.DescribeImagesInput{Filters: filter("colour", "blue")}, nil, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeImages(ctx, tc.in)
			if codeOf(err) != tc.code {
				t.Fatalf("got %v, want %q", err, tc.code)
			}
			if err != nil {
				return
			}
			var got []string
			for _, im := range out.Images {
				got = append(got, aws.ToString(im.ImageId))
				if im.State != types.ImageStateAvailable || aws.ToString(im.RootDeviceName) != "/dev/xvda" || len(im.BlockDeviceMappings) != 1 ||
					aws.ToInt32(im.BlockDeviceMappings[0].Ebs.VolumeSize) != 8 || !aws.ToBool(im.Public) {
					t.Errorf("image %+v", im)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("images %v, want %v", got, tc.want)
			}
		})
	}
}
