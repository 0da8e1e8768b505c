package ec2cloud

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// ResizeDisk implements cloud.Cloud. A disk already at least sizeGiB is left alone: EC2 would start a
// modification (and spend one of the volume's few modifications a day) even for no change.
func (c *Cloud) ResizeDisk(ctx context.Context, volumeID string, sizeGiB int32) (int32, error) {
	if sizeGiB <= 0 {
		return 0, newError("resize disk", cloud.ErrInvalidArgument, "invalid size %d GiB", sizeGiB)
	}
	m, err := c.modifiers.submit(ctx, volumeID, cloud.ModifyOptions{SizeGiB: sizeGiB}, true)
	if err != nil {
		return 0, err
	}
	return m.TargetSizeGiB, nil
}

// ModifyDisk implements cloud.Cloud.
func (c *Cloud) ModifyDisk(ctx context.Context, volumeID string, opts cloud.ModifyOptions) (*cloud.Modification, error) {
	if opts == (cloud.ModifyOptions{}) {
		return nil, newError("modify disk", cloud.ErrInvalidArgument, "nothing to modify on %s", volumeID)
	}
	return c.modifiers.submit(ctx, volumeID, opts, false)
}

// maxModifyAttempts bounds how often one modification is refused because another is in progress (someone
// else's) before giving up.
const maxModifyAttempts = 3

// modify starts a modification of d unless d already has the targets, then waits until it is usable.
// settling says our previous modification of d was returned usable but not completed: EC2 refuses another
// until it completes, so that is waited for first (rather than asking and being refused). A modification
// that EC2 refuses as in progress (someone else's, or ours from before a restart) is waited for to its end,
// then the targets are checked again.
func (c *Cloud) modify(ctx context.Context, d *cloud.Disk, opts cloud.ModifyOptions, settling bool, report func(string)) (*cloud.Modification, error) {
	for attempt := 1; ; attempt++ {
		in, changes := modifyInput(d, opts)
		if !changes {
			return &cloud.Modification{VolumeID: d.ID, State: cloud.ModificationCompleted, Progress: 100, TargetSizeGiB: d.SizeGiB,
				TargetVolumeType: d.VolumeType, TargetIOPS: d.IOPS, TargetThroughput: d.Throughput}, nil
		}
		if opts.SizeGiB > 0 && opts.SizeGiB < d.SizeGiB {
			return nil, newError("modify disk", cloud.ErrInvalidArgument, "volume %s is %d GiB; it cannot shrink to %d GiB", d.ID, d.SizeGiB, opts.SizeGiB)
		}
		if settling {
			klog.V(4).InfoS("Waiting for the previous modification to complete", "volumeID", d.ID)
			if _, err := c.waitModification(ctx, d.ID, true, report); err != nil {
				return nil, err
			}
			settling = false
		}
		out, err := c.ec2.ModifyVolume(ctx, in, c.retry.forAction("ModifyVolume"))
		if err == nil {
			klog.V(2).InfoS("Disk modification started", "volumeID", d.ID, "sizeGiB", aws.ToInt32(in.Size), "type", in.VolumeType,
				"iops", aws.ToInt32(in.Iops), "throughput", aws.ToInt32(in.Throughput))
			if m := out.VolumeModification; m != nil && modificationUsable(m.ModificationState) {
				return toModification(*m), nil
			}
			return c.waitModification(ctx, d.ID, false, report)
		}
		if errorCode(err) != codeIncorrectModState || attempt >= maxModifyAttempts {
			return nil, classify("ModifyVolume", err)
		}
		klog.V(2).InfoS("Waiting for the volume's modification in progress", "volumeID", d.ID)
		settling = true
		if d, err = c.GetDisk(ctx, d.ID); err != nil {
			return nil, err
		}
	}
}

// modifyInput asks only for what differs from the disk; changes is false when nothing does.
func modifyInput(d *cloud.Disk, opts cloud.ModifyOptions) (*ec2.ModifyVolumeInput, bool) {
	in := &ec2.ModifyVolumeInput{VolumeId: aws.String(d.ID)}
	changes := false
	if opts.SizeGiB > 0 && opts.SizeGiB != d.SizeGiB {
		in.Size, changes = aws.Int32(opts.SizeGiB), true
	}
	if opts.VolumeType != "" && opts.VolumeType != d.VolumeType {
		in.VolumeType, changes = ec2types.VolumeType(opts.VolumeType), true
	}
	if opts.IOPS > 0 && opts.IOPS != d.IOPS {
		in.Iops, changes = aws.Int32(opts.IOPS), true
	}
	if opts.Throughput > 0 && opts.Throughput != d.Throughput {
		in.Throughput, changes = aws.Int32(opts.Throughput), true
	}
	return in, changes
}

// modificationUsable: the EBS CSI driver counts optimizing as done, since the new size and performance are in
// effect from there.
func modificationUsable(state ec2types.VolumeModificationState) bool {
	return state == ec2types.VolumeModificationStateOptimizing || state == ec2types.VolumeModificationStateCompleted
}

// waitModification waits until the volume's latest modification is optimizing or completed (usable), or
// completed only when complete is set: EC2 accepts the next modification only then. report hears every state
// observed.
func (c *Cloud) waitModification(ctx context.Context, volumeID string, complete bool, report func(string)) (*cloud.Modification, error) {
	const op = "modify disk"
	var last ec2types.VolumeModification
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	what := waitModify
	if complete {
		what = waitModifyComplete
	}
	err := waitFor(ctx, c, c.modifications, what, volumeID, func(o observation[ec2types.VolumeModification]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeVolumesModifications", o.err), "modification", volumeID)
		}
		if !o.found {
			if grace.expired(true, o.at) {
				return false, newError(op, cloud.ErrNotFound, "no modification of volume %s", volumeID)
			}
			return false, nil
		}
		grace.expired(false, o.at)
		last = o.value
		report(string(o.value.ModificationState))
		done, err := modificationOutcome(o.value)
		if complete && o.value.ModificationState == ec2types.VolumeModificationStateOptimizing {
			return false, err
		}
		return done, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: modification still %s: %w", op, volumeID, seen(last.ModificationState), err)
		}
		return nil, err
	}
	klog.V(2).InfoS("Disk modification usable", "volumeID", volumeID, "state", last.ModificationState)
	return toModification(last), nil
}

// modificationOutcome judges a modification while waiting: optimizing or completed is done, modifying not
// yet, failed failed.
func modificationOutcome(m ec2types.VolumeModification) (bool, error) {
	switch {
	case modificationUsable(m.ModificationState):
		return true, nil
	case m.ModificationState == ec2types.VolumeModificationStateFailed:
		return false, newError("modify disk", cloud.ErrFailed, "modification of %s failed: %s", aws.ToString(m.VolumeId), aws.ToString(m.StatusMessage))
	}
	return false, nil
}

// fetchModifications is the modification batcher's call: DescribeVolumesModifications with a volume-id
// filter, which, unlike VolumeIds, does not fail when a volume was never modified.
func (c *Cloud) fetchModifications(ctx context.Context, ids []string) (map[string]ec2types.VolumeModification, error) {
	in := &ec2.DescribeVolumesModificationsInput{Filters: []ec2types.Filter{filter("volume-id", ids...)}, MaxResults: aws.Int32(500)}
	out := make(map[string]ec2types.VolumeModification, len(ids))
	for p := ec2.NewDescribeVolumesModificationsPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range page.VolumesModifications {
			out[aws.ToString(m.VolumeId)] = m
		}
	}
	return out, nil
}
