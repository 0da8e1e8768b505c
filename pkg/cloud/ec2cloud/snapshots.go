package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// CreateSnapshot implements cloud.Cloud. EC2's CreateSnapshot takes no idempotency token, so idempotency is
// by name: an existing snapshot with the name is returned (or refused, if it is of another disk). For the
// same reason the SDK may only replay throttled attempts (throttling is answered before anything happens);
// after an ambiguous failure (5xx, no answer) the snapshot is looked up by name before trying again, so a
// lost reply does not leave a second snapshot behind.
//
// Two concurrent calls with one name can still make two snapshots; the driver serializes operations per
// name, as CSI asks of it.
func (c *Cloud) CreateSnapshot(ctx context.Context, name, volumeID string, opts cloud.SnapshotOptions) (*cloud.Snapshot, error) {
	const op = "create snapshot"
	if name == "" || volumeID == "" {
		return nil, newError(op, cloud.ErrInvalidArgument, "a snapshot name and a source volume are required")
	}
	if s, done, err := c.existingSnapshot(ctx, name, volumeID); done {
		return s, err
	}
	tags := c.classTags(opts.Tags)
	tags[cloud.TagSnapshotName] = name
	c.addClusterTags(tags)
	in := &ec2.CreateSnapshotInput{
		VolumeId:          aws.String(volumeID),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSnapshot, Tags: tagList(tags)}},
	}
	if opts.Description != "" {
		in.Description = aws.String(opts.Description)
	}
	return createUnlessMade(ctx, c, op, name, func() (*cloud.Snapshot, error) {
		out, err := c.ec2.CreateSnapshot(ctx, in, c.retry.forAction("CreateSnapshot"), withRetryables(isThrottle))
		if err != nil {
			return nil, classify("CreateSnapshot", err)
		}
		s := toSnapshot(ec2types.Snapshot{SnapshotId: out.SnapshotId, VolumeId: out.VolumeId, VolumeSize: out.VolumeSize,
			State: out.State, Progress: out.Progress, StartTime: out.StartTime, Description: out.Description, Tags: out.Tags})
		klog.V(2).InfoS("Snapshot created", "name", name, "snapshotID", s.ID, "volumeID", volumeID)
		return s, nil
	}, func() (*cloud.Snapshot, bool, error) { return c.existingSnapshot(ctx, name, volumeID) })
}

// createUnlessMade calls create, which takes no idempotency token, so the SDK may only replay throttled
// attempts (create's call must say so, with withRetryables(isThrottle)). After an ambiguous failure (5xx, no
// answer) it looks with existing, whose done is true when it found what create makes (or failed to look),
// before trying again, so a lost reply leaves nothing twice.
func createUnlessMade[T any](ctx context.Context, c *Cloud, op, name string, create func() (T, error), existing func() (T, bool, error)) (T, error) {
	var zero T
	bo := c.wait.newBackOff()
	for attempt := 1; ; attempt++ {
		made, err := create()
		if err == nil {
			return made, nil
		}
		if !isTransient(err) || errors.Is(err, cloud.ErrThrottled) || ctx.Err() != nil {
			return zero, err
		}
		// Ambiguous: it may have been made. Look before trying again.
		if found, done, lerr := existing(); done {
			return found, lerr
		}
		if attempt >= c.retry.opts.MaxAttempts {
			return zero, err
		}
		klog.V(2).InfoS("Creation failed ambiguously and made nothing; trying again", "op", op, "name", name, "err", err)
		select {
		case <-ctx.Done():
			return zero, fmt.Errorf("%s %q: %w", op, name, ctx.Err())
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// existingSnapshot looks a snapshot up by name: done is true when it exists (returned if it is of volumeID,
// ErrAlreadyExists otherwise) or when the lookup failed.
func (c *Cloud) existingSnapshot(ctx context.Context, name, volumeID string) (*cloud.Snapshot, bool, error) {
	s, err := c.GetSnapshotByName(ctx, name)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	case s.SourceVolumeID != volumeID:
		return nil, true, newError("create snapshot", cloud.ErrAlreadyExists, "snapshot %q exists as %s of volume %s, not of %s",
			name, s.ID, s.SourceVolumeID, volumeID)
	}
	return s, true, nil
}

func isThrottle(err error) bool {
	_, ok := retry.DefaultThrottleErrorCodes[errorCode(err)]
	return ok
}

// WaitForSnapshot implements cloud.Cloud.
func (c *Cloud) WaitForSnapshot(ctx context.Context, snapshotID string) (*cloud.Snapshot, error) {
	const op = "wait for snapshot"
	var last ec2types.Snapshot
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	err := waitFor(ctx, c, c.snapshots, waitSnapshot, snapshotID, func(o observation[ec2types.Snapshot]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeSnapshots", o.err), "snapshot", snapshotID)
		}
		if !o.found {
			if grace.expired(true, o.at) {
				return false, newError(op, cloud.ErrNotFound, "snapshot %s does not exist", snapshotID)
			}
			return false, nil
		}
		grace.expired(false, o.at)
		last = o.value
		return snapshotOutcome(o.value)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: still %s: %w", op, snapshotID, seen(last.State), err)
		}
		return nil, err
	}
	return toSnapshot(last), nil
}

// snapshotOutcome judges a snapshot while waiting: completed is done, error failed, anything else not yet.
func snapshotOutcome(s ec2types.Snapshot) (bool, error) {
	switch s.State {
	case ec2types.SnapshotStateCompleted:
		return true, nil
	case ec2types.SnapshotStateError:
		return false, newError("wait for snapshot", cloud.ErrFailed, "snapshot %s failed: %s", aws.ToString(s.SnapshotId), aws.ToString(s.StateMessage))
	}
	return false, nil
}

// DeleteSnapshot implements cloud.Cloud.
func (c *Cloud) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	_, err := c.ec2.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snapshotID)}, c.retry.forAction("DeleteSnapshot"))
	if err != nil {
		return classify("DeleteSnapshot", err)
	}
	klog.V(2).InfoS("Snapshot deleted", "snapshotID", snapshotID)
	return nil
}

// GetSnapshot implements cloud.Cloud, through the snapshot batcher.
func (c *Cloud) GetSnapshot(ctx context.Context, snapshotID string) (*cloud.Snapshot, error) {
	o, err := c.snapshots.get(ctx, snapshotID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("get snapshot %s: %w", snapshotID, err)
	case o.err != nil:
		return nil, classify("DescribeSnapshots", o.err)
	case !o.found:
		return nil, newError("get snapshot", cloud.ErrNotFound, "snapshot %s does not exist", snapshotID)
	}
	return toSnapshot(o.value), nil
}

// GetSnapshotByName implements cloud.Cloud.
func (c *Cloud) GetSnapshotByName(ctx context.Context, name string) (*cloud.Snapshot, error) {
	in := &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: []ec2types.Filter{filter("tag:"+cloud.TagSnapshotName, name)}}
	for p := ec2.NewDescribeSnapshotsPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeSnapshots", err)
		}
		for _, s := range page.Snapshots {
			if s.State != ec2types.SnapshotStateError {
				return toSnapshot(s), nil
			}
		}
	}
	return nil, newError("get snapshot by name", cloud.ErrNotFound, "no snapshot named %q", name)
}

// ListSnapshots implements cloud.Cloud: the snapshots that carry a CSI name or group (and this cluster's tag, if set).
func (c *Cloud) ListSnapshots(ctx context.Context, opts cloud.SnapshotListOptions) (*cloud.SnapshotPage, error) {
	// A group's snapshots carry no name of their own, but they are the driver's too.
	filters := []ec2types.Filter{filter("tag-key", cloud.TagSnapshotName, cloud.TagGroupSnapshotID)}
	if opts.SourceVolumeID != "" {
		filters = append(filters, filter("volume-id", opts.SourceVolumeID))
	}
	if c.clusterID != "" {
		filters = append(filters, filter("tag:"+cloud.TagClusterID, c.clusterID))
	}
	snaps, next, err := listPage(opts.Page, func(token string, size *int32) ([]ec2types.Snapshot, string, error) {
		out, err := c.ec2.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: filters,
			MaxResults: size, NextToken: nonEmpty(token)})
		if err != nil {
			return nil, "", classify("DescribeSnapshots", err)
		}
		return out.Snapshots, aws.ToString(out.NextToken), nil
	})
	if err != nil {
		return nil, err
	}
	page := &cloud.SnapshotPage{NextToken: next}
	for _, s := range snaps {
		page.Snapshots = append(page.Snapshots, toSnapshot(s))
	}
	return page, nil
}

// fetchSnapshots is the snapshot batcher's call: DescribeSnapshots with a snapshot-id filter.
func (c *Cloud) fetchSnapshots(ctx context.Context, ids []string) (map[string]ec2types.Snapshot, error) {
	in := &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: []ec2types.Filter{filter("snapshot-id", ids...)}, MaxResults: aws.Int32(1000)}
	out := make(map[string]ec2types.Snapshot, len(ids))
	for p := ec2.NewDescribeSnapshotsPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Snapshots {
			out[aws.ToString(s.SnapshotId)] = s
		}
	}
	return out, nil
}
