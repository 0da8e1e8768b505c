package ec2cloud

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
// refused (ErrNotColocated) rather than snapshotted one by one, which would not be one instant, unless
// opts.MultiInstance asks for that (createSpreadGroup). Each snapshot carries the group's name, ID and size as
// tags; idempotency is by that ID, as CreateSnapshot's is by name.
func (c *Cloud) CreateSnapshotGroup(ctx context.Context, name string, volumeIDs []string, opts cloud.SnapshotGroupOptions) (*cloud.SnapshotGroup, error) {
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
	parts, err := c.groupParts(ctx, want, opts.MultiInstance)
	if err != nil {
		return nil, err
	}
	tags := c.classTags(opts.Tags)
	tags[cloud.TagGroupSnapshotName] = name
	tags[cloud.TagGroupSnapshotID] = id
	tags[cloud.TagGroupSnapshotSize] = strconv.Itoa(len(want))
	c.addClusterTags(tags)
	if len(parts) > 1 || parts[0].instanceID == "" {
		return c.createSpreadGroup(ctx, id, name, want, parts, tags, opts.Description)
	}
	spec, err := c.instanceSpec(ctx, parts[0].instanceID, want)
	if err != nil {
		return nil, err
	}
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
		snaps, err := c.madePart(ctx, name, want, aws.ToString(spec.InstanceId), out.Snapshots)
		if err != nil {
			return nil, err
		}
		g := &cloud.SnapshotGroup{ID: id, Name: name, Snapshots: snaps}
		settle(g)
		klog.V(2).InfoS("Snapshot group created", "name", name, "groupID", id, "instanceID", aws.ToString(spec.InstanceId), "volumeIDs", want)
		return g, nil
	}, func() (*cloud.SnapshotGroup, bool, error) { return c.existingGroup(ctx, id, name, want) })
}

// groupPart is what one call snapshots: volumes attached to one instance (CreateSnapshots), or one detached
// volume (CreateSnapshot; instanceID is empty).
type groupPart struct {
	instanceID string
	volumeIDs  []string
}

// groupParts places the volumes: on the one instance they are all attached to (the first by ID when
// Multi-Attach volumes share several), or, with multiInstance, one part per instance and per detached
// volume; without it a spread group is ErrNotColocated.
func (c *Cloud) groupParts(ctx context.Context, volumeIDs []string, multiInstance bool) ([]groupPart, error) {
	vols, err := c.fetchVolumes(ctx, volumeIDs)
	if err != nil {
		return nil, classify("DescribeVolumes", err)
	}
	on := map[string][]string{}
	count := map[string]int{}
	var common, where []string
	for i, id := range volumeIDs {
		v, ok := vols[id]
		if !ok {
			return nil, newError("create snapshot group", cloud.ErrNotFound, "volume %s does not exist", id)
		}
		for _, a := range v.Attachments {
			if a.State == ec2types.VolumeAttachmentStateAttached {
				on[id] = append(on[id], aws.ToString(a.InstanceId))
				count[aws.ToString(a.InstanceId)]++
			}
		}
		if i == 0 {
			common = slices.Clone(on[id])
		} else {
			common = slices.DeleteFunc(common, func(in string) bool { return !slices.Contains(on[id], in) })
		}
		if len(on[id]) == 0 {
			where = append(where, id+" is not attached")
		} else {
			where = append(where, id+" is attached to "+strings.Join(on[id], " and "))
		}
	}
	if len(common) > 0 {
		return []groupPart{{instanceID: slices.Min(common), volumeIDs: volumeIDs}}, nil
	}
	if !multiInstance {
		return nil, newError("create snapshot group", cloud.ErrNotColocated,
			"the volumes of a group snapshot must all be attached to one instance, so that one instant is taken of them all "+
				"(a VolumeGroupSnapshotClass with multiInstance: \"true\" takes one instant per instance instead): %s",
			strings.Join(where, "; "))
	}
	var parts []groupPart
	byInstance := map[string]int{}
	for _, id := range volumeIDs {
		if len(on[id]) == 0 {
			parts = append(parts, groupPart{volumeIDs: []string{id}})
			continue
		}
		// A Multi-Attach volume goes with the instance holding most of the group, so that fewer instants are taken.
		in := slices.MaxFunc(on[id], func(a, b string) int { return cmp.Or(cmp.Compare(count[a], count[b]), strings.Compare(b, a)) })
		if i, ok := byInstance[in]; ok {
			parts[i].volumeIDs = append(parts[i].volumeIDs, id)
			continue
		}
		byInstance[in] = len(parts)
		parts = append(parts, groupPart{instanceID: in, volumeIDs: []string{id}})
	}
	return parts, nil
}

// instanceSpec is CreateSnapshots' instance specification for the volumes of instanceID in volumeIDs: the
// instance's other volumes are left out.
func (c *Cloud) instanceSpec(ctx context.Context, instanceID string, volumeIDs []string) (*ec2types.InstanceSpecification, error) {
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

// createSpreadGroup takes a group spread over several instances, or with detached volumes: one CreateSnapshots
// per instance and one CreateSnapshot per detached volume, all at once so that the instances' instants are
// close. Nothing writes to a detached volume, so its snapshot is its state at any instant of the call, provided
// it is still detached afterwards. Whatever fails, everything made is deleted: no group stands in part.
func (c *Cloud) createSpreadGroup(ctx context.Context, id, name string, want []string, parts []groupPart, tags map[string]string,
	description string) (*cloud.SnapshotGroup, error) {
	type result struct {
		snaps []*cloud.Snapshot
		err   error
	}
	results := make([]result, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			results[i].snaps, results[i].err = c.createPart(ctx, id, name, p, tags, description)
		})
	}
	wg.Wait()
	g := &cloud.SnapshotGroup{ID: id, Name: name}
	var errs []error
	var detached []string
	for i, r := range results {
		g.Snapshots = append(g.Snapshots, r.snaps...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
		if parts[i].instanceID == "" {
			detached = append(detached, parts[i].volumeIDs...)
		}
	}
	if len(errs) == 0 && len(detached) > 0 {
		errs = append(errs, c.stillDetached(ctx, detached))
	}
	if err := errors.Join(errs...); err != nil {
		c.discardGroup(ctx, id, name, g.Snapshots)
		return nil, err
	}
	settle(g)
	klog.V(2).InfoS("Snapshot group created across instances", "name", name, "groupID", id, "parts", len(parts), "volumeIDs", want)
	return g, nil
}

// createPart makes one part's snapshots, with the group's tags; an ambiguous failure looks for them by the
// group's tag before trying again.
func (c *Cloud) createPart(ctx context.Context, id, name string, p groupPart, tags map[string]string, description string) ([]*cloud.Snapshot, error) {
	const op = "create snapshot group"
	tagSpecs := []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSnapshot, Tags: tagList(tags)}}
	var desc *string
	if description != "" {
		desc = aws.String(description)
	}
	existing := func() ([]*cloud.Snapshot, bool, error) {
		g, err := c.GetSnapshotGroup(ctx, id)
		switch {
		case errors.Is(err, cloud.ErrNotFound):
			return nil, false, nil
		case err != nil:
			return nil, true, err
		}
		var found []*cloud.Snapshot
		for _, s := range g.Snapshots {
			if slices.Contains(p.volumeIDs, s.SourceVolumeID) {
				found = append(found, s)
			}
		}
		if len(found) == len(p.volumeIDs) {
			return found, true, nil
		}
		// Some of a part made is no part: returned so that they are deleted with the rest.
		return found, len(found) > 0, nil
	}
	if p.instanceID == "" {
		in := &ec2.CreateSnapshotInput{VolumeId: aws.String(p.volumeIDs[0]), TagSpecifications: tagSpecs, Description: desc}
		return createUnlessMade(ctx, c, op, name, func() ([]*cloud.Snapshot, error) {
			out, err := c.ec2.CreateSnapshot(ctx, in, c.retry.forAction("CreateSnapshot"), withRetryables(isThrottle))
			if err != nil {
				return nil, classify("CreateSnapshot", err)
			}
			return []*cloud.Snapshot{toSnapshot(ec2types.Snapshot{SnapshotId: out.SnapshotId, VolumeId: out.VolumeId, VolumeSize: out.VolumeSize,
				State: out.State, Progress: out.Progress, StartTime: out.StartTime, Description: out.Description, Tags: out.Tags})}, nil
		}, existing)
	}
	spec, err := c.instanceSpec(ctx, p.instanceID, p.volumeIDs)
	if err != nil {
		return nil, err
	}
	in := &ec2.CreateSnapshotsInput{InstanceSpecification: spec, TagSpecifications: tagSpecs, Description: desc}
	return createUnlessMade(ctx, c, op, name, func() ([]*cloud.Snapshot, error) {
		out, err := c.ec2.CreateSnapshots(ctx, in, c.retry.forAction("CreateSnapshots"), withRetryables(isThrottle))
		if err != nil {
			return nil, classify("CreateSnapshots", err)
		}
		return c.madePart(ctx, name, p.volumeIDs, p.instanceID, out.Snapshots)
	}, existing)
}

// stillDetached checks that the detached volumes of a group stayed so while it was taken: one attached
// meanwhile may have been written during its snapshot, which is then of no one instant.
func (c *Cloud) stillDetached(ctx context.Context, volumeIDs []string) error {
	vols, err := c.fetchVolumes(ctx, volumeIDs)
	if err != nil {
		return classify("DescribeVolumes", err)
	}
	for _, id := range volumeIDs {
		v, ok := vols[id]
		switch {
		case !ok:
			return newError("create snapshot group", cloud.ErrNotFound, "volume %s was deleted while the group was taken", id)
		case len(v.Attachments) > 0:
			return newError("create snapshot group", cloud.ErrIncorrectState,
				"volume %s was attached to %s while the group was taken; nothing was kept", id, aws.ToString(v.Attachments[0].InstanceId))
		}
	}
	return nil
}

// discardTimeout bounds the cleanup of a failed group, which outlives the caller's deadline.
const discardTimeout = 2 * time.Minute

// discardGroup deletes what a failed create made: the snapshots it knows of and any other tagged with the
// group (a part whose failure hid what it made). It goes on if the caller gave up, so as not to leave a half
// group behind; what it cannot delete, a retry under the same name finds by the size tag and deletes.
func (c *Cloud) discardGroup(ctx context.Context, id, name string, made []*cloud.Snapshot) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
	defer cancel()
	ids := map[string]bool{}
	for _, s := range made {
		ids[s.ID] = true
	}
	if g, err := c.GetSnapshotGroup(ctx, id); err == nil {
		for _, s := range g.Snapshots {
			ids[s.ID] = true
		}
	}
	for _, sid := range slices.Sorted(maps.Keys(ids)) {
		if err := c.DeleteSnapshot(ctx, sid); err != nil && !errors.Is(err, cloud.ErrNotFound) {
			klog.ErrorS(err, "Deleting a snapshot of a failed group failed", "group", name, "snapshotID", sid)
		}
	}
}

// madePart checks what CreateSnapshots made against the volumes asked for. The instance's volumes may have
// changed between the look at its attachments and the call: a snapshot of a volume attached meanwhile is
// deleted, and if a volume of the part was detached meanwhile, the whole part is, so that no group stands
// without one of its volumes.
func (c *Cloud) madePart(ctx context.Context, name string, want []string, instanceID string, made []ec2types.SnapshotInfo) ([]*cloud.Snapshot, error) {
	var snaps []*cloud.Snapshot
	var extra []string
	for _, s := range made {
		snap := toSnapshot(ec2types.Snapshot{SnapshotId: s.SnapshotId, VolumeId: s.VolumeId, VolumeSize: s.VolumeSize, State: s.State,
			Progress: s.Progress, StartTime: s.StartTime, Description: s.Description, Tags: s.Tags, Encrypted: s.Encrypted, OwnerId: s.OwnerId})
		if slices.Contains(want, snap.SourceVolumeID) {
			snaps = append(snaps, snap)
		} else {
			extra = append(extra, snap.ID)
		}
	}
	complete := len(snaps) == len(want)
	if !complete {
		for _, s := range snaps {
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
	return snaps, nil
}

// existingGroup looks a group up by ID: done is true when it exists (returned if it is of the volumes in want,
// ErrAlreadyExists otherwise) or when the lookup failed. Fewer snapshots than the group's size tag, all of
// volumes in want, are what an interrupted create left: they are deleted, and the group is taken anew.
func (c *Cloud) existingGroup(ctx context.Context, id, name string, want []string) (*cloud.SnapshotGroup, bool, error) {
	g, err := c.GetSnapshotGroup(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	var have []string
	partial := true
	for _, s := range g.Snapshots {
		have = append(have, s.SourceVolumeID)
		partial = partial && s.Tags[cloud.TagGroupSnapshotSize] == strconv.Itoa(len(want)) && slices.Contains(want, s.SourceVolumeID)
		if s.State == string(ec2types.SnapshotStateError) {
			return nil, true, newError("create snapshot group", cloud.ErrFailed, "snapshot %s of group %q failed", s.ID, name)
		}
	}
	switch {
	case slices.Equal(have, want):
		return g, true, nil
	case partial && len(have) < len(want):
		klog.InfoS("Deleting what an interrupted group snapshot left", "name", name, "groupID", id, "volumeIDs", have)
		c.discardGroup(ctx, id, name, g.Snapshots)
		return nil, false, nil
	}
	return nil, true, newError("create snapshot group", cloud.ErrAlreadyExists, "group snapshot %q exists as %s of volumes %v, not of %v",
		name, id, have, want)
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

// settle orders a group's snapshots by source volume and dates the group by its earliest snapshot (they share
// one instant, or one per instance; the earliest holds if a clock says otherwise).
func settle(g *cloud.SnapshotGroup) {
	slices.SortFunc(g.Snapshots, func(a, b *cloud.Snapshot) int { return strings.Compare(a.SourceVolumeID, b.SourceVolumeID) })
	for i, s := range g.Snapshots {
		if i == 0 || s.CreationTime.Before(g.CreationTime) {
			g.CreationTime = s.CreationTime
		}
	}
}
