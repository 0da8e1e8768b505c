package fakecloud_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

const (
	zoneA = "us-east-1a"
	zoneB = "us-east-1b"
)

// codeOf is the EC2 error code of err, or "" for none.
func codeOf(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	if err != nil {
		return "not an API error: " + err.Error()
	}
	return ""
}

func messageOf(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorMessage()
	}
	return ""
}

func createVolume(t *testing.T, c *ec2.Client, in *ec2.CreateVolumeInput) *ec2.CreateVolumeOutput {
	t.Helper()
	if in.AvailabilityZone == nil && in.AvailabilityZoneId == nil {
		in.AvailabilityZone = aws.String(zoneA)
	}
	if in.Size == nil && in.SnapshotId == nil {
		in.Size = aws.Int32(10)
	}
	out, err := c.CreateVolume(context.Background(), in)
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	return out
}

func describeVolume(t *testing.T, c *ec2.Client, id string) types.Volume {
	t.Helper()
	out, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil {
		t.Fatalf("DescribeVolumes %s: %v", id, err)
	}
	if len(out.Volumes) != 1 {
		t.Fatalf("DescribeVolumes %s: %d volumes", id, len(out.Volumes))
	}
	return out.Volumes[0]
}

func waitVolume(t *testing.T, c *ec2.Client, id string, want types.VolumeState) types.Volume {
	t.Helper()
	var v types.Volume
	fakecloudtest.WaitFor(t, 10*time.Second, string(want)+" "+id, func(ctx context.Context) (bool, error) {
		v = describeVolume(t, c, id)
		return v.State == want, nil
	})
	return v
}

func waitSnapshot(t *testing.T, c *ec2.Client, id string, want types.SnapshotState) types.Snapshot {
	t.Helper()
	var sn types.Snapshot
	fakecloudtest.WaitFor(t, 10*time.Second, string(want)+" "+id, func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
		if err != nil {
			return false, err
		}
		sn = out.Snapshots[0]
		return sn.State == want, nil
	})
	return sn
}

func waitAttachment(t *testing.T, c *ec2.Client, id string, want types.VolumeAttachmentState) types.Volume {
	t.Helper()
	var v types.Volume
	fakecloudtest.WaitFor(t, 10*time.Second, string(want)+" attachment of "+id, func(ctx context.Context) (bool, error) {
		v = describeVolume(t, c, id)
		return len(v.Attachments) > 0 && v.Attachments[0].State == want, nil
	})
	return v
}

func waitDetached(t *testing.T, c *ec2.Client, id string) {
	t.Helper()
	fakecloudtest.WaitFor(t, 10*time.Second, "detach of "+id, func(ctx context.Context) (bool, error) {
		v := describeVolume(t, c, id)
		return len(v.Attachments) == 0 && v.State == types.VolumeStateAvailable, nil
	})
}

func waitGone(t *testing.T, c *ec2.Client, id string) {
	t.Helper()
	fakecloudtest.WaitFor(t, 10*time.Second, "deletion of "+id, func(ctx context.Context) (bool, error) {
		_, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		return codeOf(err) == "InvalidVolume.NotFound", err
	})
}

// availableVolume creates a volume and waits until it can be used.
func availableVolume(t *testing.T, c *ec2.Client, in *ec2.CreateVolumeInput) string {
	t.Helper()
	id := aws.ToString(createVolume(t, c, in).VolumeId)
	waitVolume(t, c, id, types.VolumeStateAvailable)
	return id
}

func attached(t *testing.T, c *ec2.Client, volumeID, instanceID, device string) {
	t.Helper()
	if _, err := c.AttachVolume(context.Background(), &ec2.AttachVolumeInput{VolumeId: &volumeID, InstanceId: &instanceID, Device: &device}); err != nil {
		t.Fatalf("AttachVolume: %v", err)
	}
	waitAttachment(t, c, volumeID, types.VolumeAttachmentStateAttached)
}

func statelessDescribe() state.DescribeInput { return state.DescribeInput{} }
