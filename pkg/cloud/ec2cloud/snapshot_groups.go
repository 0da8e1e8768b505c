package ec2cloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// groupID is the ID of the group made under a CSI group snapshot name. It is derived from the name (and the
// cluster, so that two clusters in one account do not share groups), so that a retry after a lost reply looks
// for the tag the lost call put on.
func (c *Cloud) groupID(name string) string {
	sum := sha256.Sum256([]byte(c.clusterID + "\x00" + name))
	return cloud.GroupIDPrefix + hex.EncodeToString(sum[:16])
}

// CreateSnapshotGroup implements cloud.Cloud with EC2's CreateSnapshots, which snapshots the volumes attached
// to one instance at one instant: the instance the volumes are all attached to, with its other volumes (and its
// boot volume, unless it is one of them) excluded. Volumes that are not all attached to one instance are
// refused (ErrNotColocated) rather than snapshotted one by one, which would not be one instant. Each snapshot
// carries the group's name and ID as tags; idempotency is by that ID, as CreateSnapshot's is by name.
func (c *Cloud) CreateSnapshotGroup(ctx context.Context, name string, volumeIDs []string, opts cloud.SnapshotOptions) (*cloud.SnapshotGroup, error) {
	const op = "create snapshot group"
	want := slices.Sorted(slices.Values(volumeIDs))
	switch {
	case name == "" || len(want) == 0:
		return nil, newError(op, cloud.ErrInvalidArgument, "a group name and source volumes are required")
	case len(slices.Compact(slices.Clone(want))) != len(want):
		return nil, newError(op, cloud.ErrInvalidArgument, "a source volume is listed twice in %v", volumeIDs)
	}
	id := c.groupID(name)
	if g, done, err := c.existingGroup(ctx, id, name, want); done {
		return g, err
	}
	spec, err := c.groupInstance(ctx, want)
	if err != nil {
		return nil, err
	}
	tags := c.classTags(opts.Tags)
	tags[cloud.TagGroupSnapshotName] = name
	tags[cloud.TagGroupSnapshotID] = id
	c.addClusterTags(tags)
	in := &ec2.CreateSnapshotsInput{
		InstanceSpecification: spec,
		TagSpecifications:     []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSnapshot, Tags: tagList(tags)}},
	}
	if opts.Description != "" {
		in.Description = aws.String(opts.Description)
	}
	return createUnlessMade(ctx, c, op, name, func() (*cloud.SnapshotGroup, error) {
		out, err := c.ec2.CreateSnapshots(ctx, in, c.retry.forAction("CreateSnapshots"), withRetryables(isThrottle))
		if err != nil {
			return nil, classify("CreateSnapshots", err)
		}
		return c.madeGroup(ctx, id, name, want, aws.ToString(spec.InstanceId), out.Snapshots)
	}, func() (*cloud.SnapshotGroup, bool, error) { return c.existingGroup(ctx, id, name, want) })
}

// groupInstance chooses the instance every volume is attached to (the first by ID when Multi-Attach volumes
// share several) and what CreateSnapshots must leave out there.
func (c *Cloud) groupInstance(ctx context.Context, volumeIDs []string) (*ec2types.InstanceSpecification, error) {
	vols, err := c.fetchVolumes(ctx, volumeIDs)
	if err != nil {
		return nil, classify("DescribeVolumes", err)
	}
	var common []string
	var where []string
	for i, id := range volumeIDs {
		v, ok := vols[id]
		if !ok {
			return nil, newError("create snapshot group", cloud.ErrNotFound, "volume %s does not exist", id)
		}
		var on []string
		for _, a := range v.Attachments {
			if a.State == ec2types.VolumeAttachmentStateAttached {
				on = append(on, aws.ToString(a.InstanceId))
			}
		}
		if i == 0 {
			common = on
		} else {
			common = slices.DeleteFunc(common, func(in string) bool { return !slices.Contains(on, in) })
		}
		if len(on) == 0 {
			where = append(where, id+" is not attached")
		} else {
			where = append(where, id+" is attached to "+strings.Join(on, " and "))
		}
	}
	if len(common) == 0 {
		return nil, newError("create snapshot group", cloud.ErrNotColocated,
			"the volumes of a group snapshot must all be attached to one instance, so that one instant is taken of them all: %s",
			strings.Join(where, "; "))
	}
	instanceID := slices.Min(common)
	inst, err := c.describeInstance(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	spec := &ec2types.InstanceSpecification{InstanceId: aws.String(instanceID), ExcludeBootVolume: aws.Bool(true)}
	root := aws.ToString(inst.RootDeviceName)
	for _, m := range inst.BlockDeviceMappings {
		if m.Ebs == nil || m.Ebs.VolumeId == nil {
			continue
		}
		vol := aws.ToString(m.Ebs.VolumeId)
		switch {
		case aws.ToString(m.DeviceName) == root:
			// EC2 excludes the boot volume by its own flag, never by ID.
			if slices.Contains(volumeIDs, vol) {
				spec.ExcludeBootVolume = aws.Bool(false)
			}
		case !slices.Contains(volumeIDs, vol):
			spec.ExcludeDataVolumeIds = append(spec.ExcludeDataVolumeIds, vol)
		}
	}
	return spec, nil
}

// madeGroup checks what CreateSnapshots made against the volumes asked for. The instance's volumes may have
// changed between the look at its attachments and the call: a snapshot of a volume attached meanwhile is
// deleted, and if a volume of the group was detached meanwhile, the whole group is, so that no group stands
// without one of its volumes.
func (c *Cloud) madeGroup(ctx context.Context, id, name string, want []string, instanceID string, made []ec2types.SnapshotInfo) (*cloud.SnapshotGroup, error) {
	g := &cloud.SnapshotGroup{ID: id, Name: name}
	var extra []string
	for _, s := range made {
		snap := toSnapshot(ec2types.Snapshot{SnapshotId: s.SnapshotId, VolumeId: s.VolumeId, VolumeSize: s.VolumeSize, State: s.State,
			Progress: s.Progress, StartTime: s.StartTime, Description: s.Description, Tags: s.Tags, Encrypted: s.Encrypted, OwnerId: s.OwnerId})
		if slices.Contains(want, snap.SourceVolumeID) {
			g.Snapshots = append(g.Snapshots, snap)
		} else {
			extra = append(extra, snap.ID)
		}
	}
	complete := len(g.Snapshots) == len(want)
	if !complete {
		for _, s := range g.Snapshots {
			extra = append(extra, s.ID)
		}
	}
	for _, sid := range extra {
		if err := c.DeleteSnapshot(ctx, sid); err != nil && !errors.Is(err, cloud.ErrNotFound) {
			// The snapshot carries the group's tags: a retry finds it and refuses the mismatch, so it is not lost.
			klog.ErrorS(err, "Deleting a snapshot made with a group but not of it failed", "group", name, "snapshotID", sid)
		}
	}
	if !complete {
		return nil, newError("create snapshot group", cloud.ErrIncorrectState,
			"a volume of %v left instance %s while the group was taken; nothing was kept", want, instanceID)
	}
	settle(g)
	klog.V(2).InfoS("Snapshot group created", "name", name, "groupID", id, "instanceID", instanceID, "volumeIDs", want)
	return g, nil
}

// existingGroup looks a group up by ID: done is true when it exists (returned if it is of the volumes in want,
// ErrAlreadyExists otherwise) or when the lookup failed.
func (c *Cloud) existingGroup(ctx context.Context, id, name string, want []string) (*cloud.SnapshotGroup, bool, error) {
	g, err := c.GetSnapshotGroup(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	var have []string
	for _, s := range g.Snapshots {
		have = append(have, s.SourceVolumeID)
		if s.State == string(ec2types.SnapshotStateError) {
			return nil, true, newError("create snapshot group", cloud.ErrFailed, "snapshot %s of group %q failed", s.ID, name)
		}
	}
	if !slices.Equal(have, want) {
		return nil, true, newError("create snapshot group", cloud.ErrAlreadyExists, "group snapshot %q exists as %s of volumes %v, not of %v",
			name, id, have, want)
	}
	return g, true, nil
}

// GetSnapshotGroup implements cloud.Cloud: the snapshots tagged with the group's ID.
func (c *Cloud) GetSnapshotGroup(ctx context.Context, groupID string) (*cloud.SnapshotGroup, error) {
	in := &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}, Filters: []ec2types.Filter{filter("tag:"+cloud.TagGroupSnapshotID, groupID)}}
	g := &cloud.SnapshotGroup{ID: groupID}
	for p := ec2.NewDescribeSnapshotsPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeSnapshots", err)
		}
		for _, s := range page.Snapshots {
			g.Snapshots = append(g.Snapshots, toSnapshot(s))
		}
	}
	if len(g.Snapshots) == 0 {
		return nil, newError("get snapshot group", cloud.ErrNotFound, "snapshot group %s does not exist", groupID)
	}
	g.Name = g.Snapshots[0].Tags[cloud.TagGroupSnapshotName]
	settle(g)
	return g, nil
}

// settle orders a group's snapshots by source volume and dates the group by its earliest snapshot (they all
// share one instant; the earliest holds if a clock says otherwise).
func settle(g *cloud.SnapshotGroup) {
	slices.SortFunc(g.Snapshots, func(a, b *cloud.Snapshot) int { return strings.Compare(a.SourceVolumeID, b.SourceVolumeID) })
	for i, s := range g.Snapshots {
		if i == 0 || s.CreationTime.Before(g.CreationTime) {
			g.CreationTime = s.CreationTime
		}
	}
}
