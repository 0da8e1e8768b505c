package fakecloud_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestTagAnswers: EC2's answers to tag requests it refuses: too many tags is TagLimitExceeded, and a
// missing resource list names resourceIdSet.
func TestTagAnswers(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	tags := func(n int, prefix string) []types.Tag {
		out := make([]types.Tag, n)
		for i := range out {
			out[i] = types.Tag{Key: aws.String(fmt.Sprintf("%s%d", prefix, i)), Value: aws.String("v")}
		}
		return out
	}
	if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: tags(50, "a")}); err != nil {
		t.Fatalf("50 tags: %v", err)
	}
	for _, tc := range []struct {
		name, code, inMessage string
		call                  func() error
	}{
		{"51st tag on a resource", "TagLimitExceeded", "", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{vol}, Tags: tags(1, "b")})
			return err
		}},
		{"51 tags in one request", "TagLimitExceeded", "", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume, Tags: tags(51, "c")}}})
			return err
		}},
		{"a tag specification with no tags", "InvalidTagKey.Malformed", "at least one tag", func() error {
			_, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume}}})
			return err
		}},
		{"CreateTags without resources", "MissingParameter", "resourceIdSet", func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{}, Tags: tags(1, "d")})
			return err
		}},
		{"DeleteTags without resources", "MissingParameter", "resourceIdSet", func() error {
			_, err := c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if codeOf(err) != tc.code || !strings.Contains(messageOf(err), tc.inMessage) {
				t.Fatalf("got %q %q, want %s naming %q", codeOf(err), messageOf(err), tc.code, tc.inMessage)
			}
		})
	}
}

// TestTimeFilters: a time filter given the very value fakecloud displays (with milliseconds) finds the record,
// as does the same time in whole seconds.
func TestTimeFilters(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	attached(t, c, vol, fakecloudtest.InstanceA, "/dev/xvdba")
	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	// Times as the client decoded them from fakecloud's replies.
	v := describeVolume(t, c, vol)
	ms := "2006-01-02T15:04:05.000Z"
	sec := "2006-01-02T15:04:05Z"
	for _, tc := range []struct {
		name, filter, value string
		snapshot            bool
	}{
		{"create-time as displayed", "create-time", v.CreateTime.UTC().Format(ms), false},
		{"create-time in seconds", "create-time", v.CreateTime.UTC().Format(sec), false},
		{"attachment.attach-time as displayed", "attachment.attach-time", v.Attachments[0].AttachTime.UTC().Format(ms), false},
		{"start-time as displayed", "start-time", snap.StartTime.UTC().Format(ms), true},
		{"start-time in seconds", "start-time", snap.StartTime.UTC().Format(sec), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flt := []types.Filter{{Name: aws.String(tc.filter), Values: []string{tc.value}}}
			var n int
			if tc.snapshot {
				out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{Filters: flt})
				if err != nil {
					t.Fatal(err)
				}
				n = len(out.Snapshots)
			} else {
				out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: flt})
				if err != nil {
					t.Fatal(err)
				}
				n = len(out.Volumes)
			}
			if n != 1 {
				t.Fatalf("filter %s=%s found %d records, want 1", tc.filter, tc.value, n)
			}
		})
	}
}

// TestModifyVolumeDefaultIops: ModifyVolume to io1, io2 or gp3 without Iops takes EC2's documented default of
// 3,000 IOPS instead of refusing the request.
func TestModifyVolumeDefaultIops(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	for _, to := range []types.VolumeType{types.VolumeTypeIo1, types.VolumeTypeIo2, types.VolumeTypeGp3} {
		t.Run(string(to), func(t *testing.T) {
			vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(100), VolumeType: types.VolumeTypeGp2})
			out, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, VolumeType: to})
			if err != nil {
				t.Fatalf("ModifyVolume to %s without Iops: %v", to, err)
			}
			if got := aws.ToInt32(out.VolumeModification.TargetIops); got != 3000 {
				t.Fatalf("target IOPS %d, want 3000", got)
			}
		})
	}
}

// namesOf lists the IDs or names of a Describe answer's items, in its order.
func namesOf[O, T any](out *O, err error, items func(*O) []T, name func(T) *string) ([]string, error) {
	if err != nil {
		return nil, err
	}
	var names []string
	for _, it := range items(out) {
		names = append(names, aws.ToString(name(it)))
	}
	return names, nil
}

// TestDocumentedFilters: filters EC2 documents for what fakecloud models are accepted and select as EC2's do.
func TestDocumentedFilters(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{})
	zones, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-east-1a"}})
	if err != nil || len(zones.AvailabilityZones) != 1 {
		t.Fatalf("DescribeAvailabilityZones: %v %v", zones, err)
	}
	zoneID := aws.ToString(zones.AvailabilityZones[0].ZoneId)
	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	one := func(name, value string) []types.Filter { return []types.Filter{{Name: &name, Values: []string{value}}} }
	volumes := func(name, value string) ([]string, error) {
		out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: one(name, value)})
		return namesOf(out, err, func(o *ec2.DescribeVolumesOutput) []types.Volume { return o.Volumes }, func(v types.Volume) *string { return v.VolumeId })
	}
	snapshots := func(name, value string) ([]string, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: one(name, value)})
		return namesOf(out, err, func(o *ec2.DescribeSnapshotsOutput) []types.Snapshot { return o.Snapshots }, func(s types.Snapshot) *string { return s.SnapshotId })
	}
	if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(20)}); err != nil {
		t.Fatal(err)
	}
	modified := func(name, value string) ([]string, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{Filters: one(name, value)})
		return namesOf(out, err, func(o *ec2.DescribeVolumesModificationsOutput) []types.VolumeModification {
			return o.VolumesModifications
		},
			func(m types.VolumeModification) *string { return m.VolumeId })
	}
	zoneNames := func(name, value string) ([]string, error) {
		out, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{Filters: one(name, value)})
		return namesOf(out, err, func(o *ec2.DescribeAvailabilityZonesOutput) []types.AvailabilityZone { return o.AvailabilityZones },
			func(z types.AvailabilityZone) *string { return z.ZoneName })
	}
	instances := func(name, value string) ([]string, error) {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: append(one(name, value), one("instance-id", fakecloudtest.InstanceA)...)})
		var insts []types.Instance
		if err == nil {
			for _, r := range out.Reservations {
				insts = append(insts, r.Instances...)
			}
		}
		return namesOf(&insts, err, func(o *[]types.Instance) []types.Instance { return *o }, func(i types.Instance) *string { return i.InstanceId })
	}
	for _, tc := range []struct {
		name, filter, value string
		list                func(string, string) ([]string, error)
		want                []string
	}{
		{"volume by zone ID", "availability-zone-id", zoneID, volumes, []string{vol}},
		{"volume by another zone ID", "availability-zone-id", "use1-az999", volumes, nil},
		{"volume not fast-restored", "fast-restored", "false", volumes, []string{vol}},
		{"no fast-restored volume", "fast-restored", "true", volumes, nil},
		{"no snapshot has Amazon's alias", "owner-alias", "amazon", snapshots, nil},
		{"volume managed by no operator", "operator.managed", "false", volumes, []string{vol}},
		{"no volume managed by an operator", "operator.managed", "true", volumes, nil},
		{"snapshot by standard transfer", "transfer-type", "standard", snapshots, []string{aws.ToString(snap.SnapshotId)}},
		{"no time-based snapshot", "transfer-type", "time-based", snapshots, nil},
		{"modification keeping multi-attach off", "targetMultiAttachEnabled", "false", modified, []string{vol}},
		{"no modification from multi-attach", "originalMultiAttachEnabled", "true", modified, nil},
		{"instance by zone ID", "availability-zone-id", zoneID, instances, []string{fakecloudtest.InstanceA}},
		{"instance by architecture", "architecture", "x86_64", instances, []string{fakecloudtest.InstanceA}},
		{"instance by owner", "owner-id", env.Server.State.AccountID(), instances, []string{fakecloudtest.InstanceA}},
		{"EBS-backed instance", "root-device-type", "ebs", instances, []string{fakecloudtest.InstanceA}},
		{"no spot instance", "instance-lifecycle", "spot", instances, nil},
		{"zone needing no opt-in", "opt-in-status", "opt-in-not-required", zoneNames, []string{"us-east-1a", "us-east-1b", "us-east-1c"}},
		{"zone by its group", "group-name", "us-east-1-zg-1", zoneNames, []string{"us-east-1a", "us-east-1b", "us-east-1c"}},
		{"no zone has a parent", "parent-zone-name", "us-east-1a", zoneNames, nil},
		{"snapshot by its ID still", "snapshot-id", aws.ToString(snap.SnapshotId), snapshots, []string{aws.ToString(snap.SnapshotId)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.list(tc.filter, tc.value)
			if err != nil {
				t.Fatalf("filter %s=%s: %v", tc.filter, tc.value, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("filter %s=%s found %v, want %v", tc.filter, tc.value, got, tc.want)
			}
		})
	}
}

// TestDescribeTags: every tag of volumes, snapshots and instances, by EC2's filters with wildcards, in pages.
func TestDescribeTags(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	volA := availableVolume(t, c, &ec2.CreateVolumeInput{})
	volB := availableVolume(t, c, &ec2.CreateVolumeInput{})
	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &volA})
	if err != nil {
		t.Fatal(err)
	}
	snapID := aws.ToString(snap.SnapshotId)
	for _, tc := range []struct {
		id   string
		tags []types.Tag
	}{
		{volA, []types.Tag{tag("team", "disks"), tag("env", "prod")}},
		{volB, []types.Tag{tag("team", "db")}},
		{snapID, []types.Tag{tag("team", "disks")}},
		{fakecloudtest.InstanceA, []types.Tag{tag("Name", "node-a")}},
	} {
		if _, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{tc.id}, Tags: tc.tags}); err != nil {
			t.Fatal(err)
		}
	}
	row := func(id, typ, k, v string) string { return id + " " + typ + " " + k + "=" + v }
	describe := func(filters ...types.Filter) ([]string, error) {
		var out []string
		pages := ec2.NewDescribeTagsPaginator(c, &ec2.DescribeTagsInput{Filters: filters, MaxResults: aws.Int32(5)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, err
			}
			for _, d := range page.Tags {
				out = append(out, row(aws.ToString(d.ResourceId), string(d.ResourceType), aws.ToString(d.Key), aws.ToString(d.Value)))
			}
		}
		return out, nil
	}
	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	for _, tc := range []struct {
		name    string
		filters []types.Filter
		want    []string
	}{
		{"by key", []types.Filter{f("key", "team")}, []string{row(snapID, "snapshot", "team", "disks"), row(volA, "volume", "team", "disks"), row(volB, "volume", "team", "db")}},
		{"by value with a wildcard", []types.Filter{f("value", "d?sk*")}, []string{row(snapID, "snapshot", "team", "disks"), row(volA, "volume", "team", "disks")}},
		{"by resource type", []types.Filter{f("resource-type", "instance")}, []string{row(fakecloudtest.InstanceA, "instance", "Name", "node-a")}},
		{"by resource ID, every tag of it", []types.Filter{f("resource-id", volA)}, []string{row(volA, "volume", "env", "prod"), row(volA, "volume", "team", "disks")}},
		{"tag:KEY selects resources", []types.Filter{f("tag:env", "prod")}, []string{row(volA, "volume", "env", "prod"), row(volA, "volume", "team", "disks")}},
		{"filters together", []types.Filter{f("key", "team"), f("resource-type", "volume")}, []string{row(volA, "volume", "team", "disks"), row(volB, "volume", "team", "db")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := describe(tc.filters...)
			if err != nil {
				t.Fatal(err)
			}
			// Listed in order of resource ID, then key; the IDs are random, so the want is sorted the same way.
			slices.Sort(tc.want)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
		})
	}
	all, err := describe()
	if err != nil || len(all) != 5 {
		t.Fatalf("all tags over pages of 5: %v %v, want 5", all, err)
	}
	for _, tc := range []struct {
		name string
		in   *ec2.DescribeTagsInput
		code string
	}{
		{"an unknown filter", &ec2.DescribeTagsInput{Filters: []types.Filter{f("colour", "red")}}, "InvalidParameterValue"},
		{"a page below 5", &ec2.DescribeTagsInput{MaxResults: aws.Int32(4)}, "InvalidParameterValue"},
		{"a bad token", &ec2.DescribeTagsInput{NextToken: aws.String("!!")}, "InvalidPaginationToken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.DescribeTags(ctx, tc.in); codeOf(err) != tc.code {
				t.Fatalf("got %q (%v), want %s", codeOf(err), err, tc.code)
			}
		})
	}
}
