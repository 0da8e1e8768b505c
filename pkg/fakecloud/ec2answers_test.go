package fakecloud_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

func statusOf(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// TestDryRunEveryAction: DryRun on every read answers DryRunOperation with 412 after checking the request, as
// EC2 does; a health check that dry-runs a describe must see it.
func TestDryRunEveryAction(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(11)}); err != nil {
		t.Fatal(err)
	}
	dry := aws.Bool(true)
	calls := map[string]func() error{
		"DescribeVolumes": func() error {
			_, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{DryRun: dry})
			return err
		},
		"DescribeSnapshots": func() error {
			_, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{DryRun: dry})
			return err
		},
		"DescribeInstances": func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{DryRun: dry})
			return err
		},
		"DescribeAvailabilityZones": func() error {
			_, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{DryRun: dry})
			return err
		},
		"DescribeVolumesModifications": func() error {
			_, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{vol}, DryRun: dry})
			return err
		},
		"DescribeInstanceTypes": func() error {
			_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{DryRun: dry})
			return err
		},
		"DescribeVolumeStatus": func() error {
			_, err := c.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{vol}, DryRun: dry})
			return err
		},
		"DescribeFastSnapshotRestores": func() error {
			_, err := c.DescribeFastSnapshotRestores(ctx, &ec2.DescribeFastSnapshotRestoresInput{DryRun: dry})
			return err
		},
		"CreateTags": func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}, DryRun: dry})
			return err
		},
		"DeleteVolume": func() error {
			_, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &vol, DryRun: dry})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if codeOf(err) != "DryRunOperation" || statusOf(err) != http.StatusPreconditionFailed {
			t.Errorf("%s with DryRun: %v (status %d), want DryRunOperation with 412", name, err, statusOf(err))
		}
	}
	// The request is checked before the DryRun answer.
	_, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{DryRun: dry, Filters: []types.Filter{{Name: aws.String("no-such-filter"), Values: []string{"x"}}}})
	if codeOf(err) != "InvalidParameterValue" {
		t.Errorf("DryRun with a bad filter: %v, want InvalidParameterValue", err)
	}
	_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{DryRun: dry, VolumeIds: []string{"vol-0ffffffffffffffff"}})
	if codeOf(err) != "InvalidVolume.NotFound" {
		t.Errorf("DryRun of a missing volume: %v, want InvalidVolume.NotFound", err)
	}
	// Nothing changed.
	if v := describeVolume(t, c, vol); len(v.Tags) != 0 || v.State != types.VolumeStateAvailable {
		t.Errorf("dry runs changed the volume: %+v", v)
	}
}

// TestMaxResultsZero: 0 means no limit given (a widely used driver sends it on every ListSnapshots).
func TestMaxResultsZero(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	var vols []string
	for range 7 {
		vols = append(vols, availableVolume(t, c, &ec2.CreateVolumeInput{}))
	}
	for _, v := range vols {
		if _, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(v)}); err != nil {
			t.Fatal(err)
		}
	}
	snaps, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{MaxResults: aws.Int32(0), OwnerIds: []string{"self"}})
	if err != nil || len(snaps.Snapshots) != 7 || aws.ToString(snaps.NextToken) != "" {
		t.Errorf("DescribeSnapshots MaxResults=0: %v, err %v; want all 7 on one page", snaps, err)
	}
	out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(0), VolumeIds: vols[:2]})
	if err != nil || len(out.Volumes) != 2 {
		t.Errorf("DescribeVolumes by ID with MaxResults=0: %v, err %v", out, err)
	}
}

// TestDescribeInstanceTypes: the types fakecloud knows, with the EBS attachment limit it enforces on their
// instances.
func TestDescribeInstanceTypes(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{{ID: "i-0a000000000000001", Zone: zoneA}, {ID: "i-0a000000000000002", Zone: zoneA, InstanceType: "m4.large"}}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	c := env.EC2(t)
	ctx := context.Background()

	out, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m5.large", "m4.large"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[types.InstanceType]types.InstanceTypeInfo{}
	for _, it := range out.InstanceTypes {
		got[it.InstanceType] = it
	}
	for name, want := range map[types.InstanceType]types.EbsNvmeSupport{"m5.large": types.EbsNvmeSupportRequired, "m4.large": types.EbsNvmeSupportUnsupported} {
		it, ok := got[name]
		if !ok || it.EbsInfo == nil {
			t.Fatalf("%s missing from %+v", name, out.InstanceTypes)
		}
		info, _ := instancetypes.Lookup(string(name))
		if aws.ToInt32(it.EbsInfo.MaximumEbsAttachments) != info.MaximumEbsAttachments || it.EbsInfo.NvmeSupport != want {
			t.Errorf("%s EbsInfo = %d attachments, NVMe %s; want %d, %s", name, aws.ToInt32(it.EbsInfo.MaximumEbsAttachments),
				it.EbsInfo.NvmeSupport, info.MaximumEbsAttachments, want)
		}
	}
	if _, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x9.huge"}}); codeOf(err) != "InvalidInstanceType" {
		t.Errorf("unknown type: %v, want InvalidInstanceType", err)
	}
	all, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(5)})
	pages := ec2.NewDescribeInstanceTypesPaginator(c, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(5)})
	n := 0
	for pages.HasMorePages() {
		p, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.InstanceTypes)
	}
	if err != nil || len(all.InstanceTypes) != 5 || n != len(instancetypes.Names()) {
		t.Errorf("paging instance types: first page %d (err %v), %d in all, want %d", len(all.InstanceTypes), err, n, len(instancetypes.Names()))
	}

	// The limit fakecloud enforces is the one the type reports: its slots less the root volume (and, on a
	// shared Nitro limit, the network interface).
	insts, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range insts.Reservations {
		inst := r.Instances[0]
		info, _ := instancetypes.Lookup(string(inst.InstanceType))
		if n := attachUntilRefused(t, c, aws.ToString(inst.InstanceId)); n != info.VolumeLimit() {
			t.Errorf("%s (%s): %d volumes attached before AttachmentLimitExceeded, want %d", aws.ToString(inst.InstanceId), inst.InstanceType, n, info.VolumeLimit())
		}
	}
}

// attachUntilRefused attaches new volumes to an instance until EC2 refuses with AttachmentLimitExceeded, and
// returns how many it took.
func attachUntilRefused(t *testing.T, c *ec2.Client, instanceID string) int {
	t.Helper()
	ctx := context.Background()
	for n := 0; n < 100; n++ {
		vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
		dev := fmt.Sprintf("/dev/xvd%c%c", 'b'+n/26, 'a'+n%26)
		_, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: &instanceID, Device: &dev})
		if codeOf(err) == "AttachmentLimitExceeded" {
			return n
		}
		if err != nil {
			t.Fatalf("attach %d: %v", n, err)
		}
	}
	t.Fatalf("no limit on %s", instanceID)
	return 0
}

// TestBadInputRefused: requests EC2 refuses are refused, with EC2's code, and change nothing: the same tag key
// twice, a modification that changes nothing, free text past EC2's bounds. An error echoing a huge value stays
// small.
func TestBadInputRefused(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(10), VolumeType: types.VolumeTypeGp3})
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	twice := []types.Tag{tag("team", "a"), tag("team", "b")}
	huge := strings.Repeat("d", 300_000)
	cases := []struct {
		name      string
		call      func() error
		code, msg string
	}{
		{"same key twice in a tag specification", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: twice}}})
			return err
		}, "InvalidParameterValue", "Duplicate tag key 'team'"},
		{"same key in two tag specifications", func() error {
			_, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol, TagSpecifications: []types.TagSpecification{
				{ResourceType: types.ResourceTypeSnapshot, Tags: twice[:1]}, {ResourceType: types.ResourceTypeSnapshot, Tags: twice[1:]}}})
			return err
		}, "InvalidParameterValue", "Duplicate tag key 'team'"},
		{"same key twice in CreateTags", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: twice})
			return err
		}, "InvalidParameterValue", "Duplicate tag key 'team'"},
		{"modification that changes nothing", func() error {
			_, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(10), VolumeType: types.VolumeTypeGp3, Iops: aws.Int32(3000)})
			return err
		}, "InvalidParameterValue", "already has the requested configuration"},
		{"modification with no parameters", func() error {
			_, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol})
			return err
		}, "InvalidParameterValue", "already has the requested configuration"},
		{"snapshot description of 300,000 characters", func() error {
			_, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol, Description: aws.String(huge)})
			return err
		}, "InvalidParameterValue", "at most 255 characters"},
		{"tag key of 129 characters", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: []types.Tag{tag(strings.Repeat("k", 129), "v")}})
			return err
		}, "InvalidParameterValue", "at most 128 characters"},
		{"tag value of 257 characters", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: []types.Tag{tag("k", strings.Repeat("é", 257))}})
			return err
		}, "InvalidParameterValue", "at most 256 characters"},
		{"KMS key of 300,000 characters", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1), Encrypted: aws.Bool(true), KmsKeyId: aws.String(huge)})
			return err
		}, "InvalidParameterValue", "kmsKeyId"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if codeOf(err) != tc.code || !strings.Contains(messageOf(err), tc.msg) {
				t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.msg)
			}
			if len(messageOf(err)) > 2048 {
				t.Errorf("the error echoes %d bytes", len(messageOf(err)))
			}
		})
	}
	// A description of 255 characters, multibyte ones included, and tags at their limits are fine.
	if _, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol, Description: aws.String(strings.Repeat("é", 255)),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeSnapshot,
			Tags: []types.Tag{tag(strings.Repeat("k", 128), strings.Repeat("é", 256))}}}}); err != nil {
		t.Errorf("CreateSnapshot at the limits: %v", err)
	}
	// Nothing refused changed anything.
	if v := describeVolume(t, c, vol); len(v.Tags) != 0 || aws.ToInt32(v.Size) != 10 {
		t.Errorf("refused requests changed the volume: %+v", v)
	}
	if _, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{vol}}); codeOf(err) != "InvalidVolumeModification.NotFound" {
		t.Errorf("a refused modification was recorded: %v", err)
	}
	out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil || len(out.Volumes) != 1 {
		t.Errorf("refused creates made volumes: %v, %v", out, err)
	}
	snaps, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}})
	if err != nil || len(snaps.Snapshots) != 1 {
		t.Errorf("refused snapshots were made: %v, %v", snaps, err)
	}
}
