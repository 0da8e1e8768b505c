package ec2cloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/volumetypes"
)

// maxTokenGenerations bounds how often CreateDisk steps past a token whose disk is deleting or deleted. EC2
// keeps a token bound to its disk for a while after the disk is gone (fakecloud: --client-token-retention), so
// a name created and deleted n times in that while takes n steps; the bound only stops a cloud that answers
// every token with a deleted disk.
const maxTokenGenerations = 64

// clientToken derives CreateVolume's ClientToken from the CSI volume name: hex SHA-256, 64 characters, EC2's
// limit. A retried CreateDisk (after a lost reply, a timeout, a restart) sends the same token and so gets the
// same disk back; the same name with other parameters gets IdempotentParameterMismatch.
//
// A token stays bound to its disk while the disk is being deleted, and on real EC2 possibly longer. When the
// token answers with a disk that is deleting or deleted (a name reused after DeleteDisk), CreateDisk moves to
// the next generation: the token of name + that disk's ID. This is as deterministic as the first token, so a
// retry of the retry lands on the same new disk.
func clientToken(name, previousVolumeID string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + previousVolumeID))
	if previousVolumeID == "" {
		sum = sha256.Sum256([]byte(name))
	}
	return hex.EncodeToString(sum[:])
}

// CreateDisk implements cloud.Cloud.
func (c *Cloud) CreateDisk(ctx context.Context, name string, opts cloud.DiskOptions) (*cloud.Disk, error) {
	const op = "create disk"
	switch {
	case name == "":
		return nil, newError(op, cloud.ErrInvalidArgument, "a disk name is required")
	case opts.Zone == "":
		return nil, newError(op, cloud.ErrInvalidArgument, "disk %q: a zone is required", name)
	case opts.SizeGiB <= 0 && opts.SnapshotID == "" && opts.SourceDiskID == "":
		return nil, newError(op, cloud.ErrInvalidArgument, "disk %q: a size, a snapshot or a source disk is required", name)
	case opts.SnapshotID != "" && opts.SourceDiskID != "":
		return nil, newError(op, cloud.ErrInvalidArgument, "disk %q: a snapshot and a source disk are exclusive", name)
	}
	if opts.SizeGiB > 0 {
		if err := volumetypes.CheckSize(opts.VolumeType, opts.SizeGiB); err != nil {
			return nil, newError(op, cloud.ErrOutOfRange, "disk %q: %v", name, err)
		}
	}
	submit, action := c.createVolume(name, opts), "CreateVolume"
	if opts.SourceDiskID != "" {
		submit, action = c.copyVolume(name, opts), "CopyVolumes"
	}

	var out ec2types.Volume
	previous := ""
	for gen := 0; ; gen++ {
		var err error
		out, err = submit(ctx, clientToken(name, previous))
		if err != nil {
			return nil, classify(action, err)
		}
		if out.State != ec2types.VolumeStateDeleting && out.State != ec2types.VolumeStateDeleted {
			break
		}
		if gen+1 >= maxTokenGenerations {
			return nil, newError(op, cloud.ErrIncorrectState, "disk %q: its token still answers with deleted disk %s", name, aws.ToString(out.VolumeId))
		}
		previous = aws.ToString(out.VolumeId)
		klog.V(2).InfoS("Disk name reused after deletion; creating under the next token", "name", name, "deletedVolumeID", previous)
	}
	id := aws.ToString(out.VolumeId)
	klog.V(4).InfoS("Disk creation accepted", "action", action, "name", name, "volumeID", id, "state", out.State)

	var last ec2types.Volume
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	err := waitFor(ctx, c, c.volumes, waitCreate, id, func(o observation[ec2types.Volume]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeVolumes", o.err), "volume available", id)
		}
		if !o.found {
			if grace.expired(true, o.at) {
				return false, newError(op, cloud.ErrFailed, "disk %q: volume %s vanished while creating", name, id)
			}
			return false, nil
		}
		grace.expired(false, o.at)
		last = o.value
		return creationOutcome(o.value.State)
	})
	switch {
	case err == nil:
		d := toDisk(last)
		klog.V(2).InfoS("Disk created", "name", name, "volumeID", id, "zone", d.Zone, "sizeGiB", d.SizeGiB)
		return d, nil
	case errors.Is(err, cloud.ErrFailed) && last.State == ec2types.VolumeStateError:
		c.deleteFailed(ctx, id)
		return nil, fmt.Errorf("disk %q: volume %s went to state error and was deleted: %w", name, id, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s %q: volume %s still %s: %w", op, name, id, seen(last.State), err)
	}
	return nil, err
}

// volumeSubmit sends one creation request under a ClientToken and returns the volume it made.
type volumeSubmit func(ctx context.Context, token string) (ec2types.Volume, error)

// createVolumeInput maps the options onto CreateVolume's request; CopyVolumes takes the same fields.
func (c *Cloud) createVolumeInput(name string, opts cloud.DiskOptions) *ec2.CreateVolumeInput {
	return &ec2.CreateVolumeInput{
		AvailabilityZone:   aws.String(opts.Zone),
		TagSpecifications:  []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeVolume, Tags: tagList(c.diskTags(name, opts))}},
		VolumeType:         ec2types.VolumeType(opts.VolumeType),
		Size:               positive(opts.SizeGiB),
		Iops:               positive(opts.IOPS),
		Throughput:         positive(opts.Throughput),
		Encrypted:          trueOrNil(opts.Encrypted),
		KmsKeyId:           nonEmpty(opts.KMSKeyID),
		SnapshotId:         nonEmpty(opts.SnapshotID),
		MultiAttachEnabled: trueOrNil(opts.MultiAttach),
		// EC2 refuses a rate without a snapshot; CopyVolumes takes none.
		VolumeInitializationRate: positive(opts.InitializationRate),
	}
}

func (c *Cloud) createVolume(name string, opts cloud.DiskOptions) volumeSubmit {
	in := c.createVolumeInput(name, opts)
	return func(ctx context.Context, token string) (ec2types.Volume, error) {
		in.ClientToken = aws.String(token)
		out, err := c.ec2.CreateVolume(ctx, in, c.retry.forAction("CreateVolume"))
		if err != nil {
			return ec2types.Volume{}, err
		}
		return ec2types.Volume{VolumeId: out.VolumeId, State: out.State}, nil
	}
}

// copyVolume copies opts.SourceDiskID (EC2's CopyVolumes), which makes the copy in the source's zone.
func (c *Cloud) copyVolume(name string, opts cloud.DiskOptions) volumeSubmit {
	v := c.createVolumeInput(name, opts)
	in := &ec2.CopyVolumesInput{SourceVolumeId: aws.String(opts.SourceDiskID), TagSpecifications: v.TagSpecifications,
		VolumeType: v.VolumeType, Size: v.Size, Iops: v.Iops, Throughput: v.Throughput, Encrypted: v.Encrypted,
		KmsKeyId: v.KmsKeyId, MultiAttachEnabled: v.MultiAttachEnabled}
	return func(ctx context.Context, token string) (ec2types.Volume, error) {
		in.ClientToken = aws.String(token)
		out, err := c.ec2.CopyVolumes(ctx, in, c.retry.forAction("CopyVolumes"))
		if err != nil {
			return ec2types.Volume{}, err
		}
		if len(out.Volumes) != 1 {
			return ec2types.Volume{}, newError("copy disk", cloud.ErrFailed, "CopyVolumes answered %d volumes, want 1", len(out.Volumes))
		}
		return out.Volumes[0], nil
	}
}

// Optional request fields: nil leaves them to the cloud's default.
func positive(n int32) *int32 {
	if n <= 0 {
		return nil
	}
	return aws.Int32(n)
}

func trueOrNil(b bool) *bool {
	if !b {
		return nil
	}
	return aws.Bool(true)
}

// creationOutcome judges a volume state while waiting for a new disk: available (or already in use) is done,
// creating is not yet, error failed, and deleting or deleted means someone deleted it.
func creationOutcome(state ec2types.VolumeState) (bool, error) {
	switch state {
	case ec2types.VolumeStateAvailable, ec2types.VolumeStateInUse:
		return true, nil
	case ec2types.VolumeStateCreating, "":
		return false, nil
	case ec2types.VolumeStateError:
		return false, newError("create disk", cloud.ErrFailed, "volume state error")
	default:
		return false, newError("create disk", cloud.ErrFailed, "volume %s while creating", state)
	}
}

// deleteFailed deletes a disk that failed to create, even if the caller's context has ended, so that nothing
// is leaked.
func (c *Cloud) deleteFailed(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.wait.FetchTimeout)
	defer cancel()
	if err := c.DeleteDisk(ctx, id); err != nil && !errors.Is(err, cloud.ErrNotFound) {
		klog.ErrorS(err, "Deleting failed disk failed; it is leaked", "volumeID", id)
		return
	}
	klog.InfoS("Deleted disk that failed to create", "volumeID", id)
}

// diskTags are a new disk's tags: the caller's, then the driver's own, which win.
func (c *Cloud) diskTags(name string, opts cloud.DiskOptions) map[string]string {
	tags := c.classTags(opts.Tags)
	tags[cloud.TagName] = name
	for k, v := range map[string]string{cloud.TagPVCName: opts.PVCName, cloud.TagPVCNamespace: opts.PVCNamespace, cloud.TagPVName: opts.PVName} {
		if v != "" {
			tags[k] = v
		}
	}
	c.addClusterTags(tags)
	return tags
}

// classTags are the --extra-tags overridden by a class's tags: a new map, to which the caller adds the
// driver's own.
func (c *Cloud) classTags(class map[string]string) map[string]string {
	tags := maps.Clone(c.extraTags)
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, class)
	return tags
}

func (c *Cloud) addClusterTags(tags map[string]string) {
	if c.clusterID != "" {
		tags[cloud.TagClusterID] = c.clusterID
		tags[cloud.TagKubernetesClusterPrefix+c.clusterID] = "owned"
	}
}

// DeleteDisk implements cloud.Cloud. It returns when EC2 has accepted the deletion and does not wait for the
// volume to disappear, like the EBS CSI driver: once accepted, the volume can no longer be attached and EC2
// finishes on its own, so a wait would only add calls. A second call while the volume is deleting is accepted
// again (or gives ErrNotFound once it is gone).
func (c *Cloud) DeleteDisk(ctx context.Context, volumeID string) error {
	_, err := c.ec2.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(volumeID)}, c.retry.forAction("DeleteVolume"))
	if err != nil {
		return classify("DeleteVolume", err)
	}
	klog.V(2).InfoS("Disk deletion accepted", "volumeID", volumeID)
	return nil
}

// GetDisk implements cloud.Cloud. It goes through the batcher, so it shares calls with waits in progress.
func (c *Cloud) GetDisk(ctx context.Context, volumeID string) (*cloud.Disk, error) {
	o, err := c.volumes.get(ctx, volumeID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("get disk %s: %w", volumeID, err)
	case o.err != nil:
		return nil, classify("DescribeVolumes", o.err)
	case !o.found:
		return nil, newError("get disk", cloud.ErrNotFound, "volume %s does not exist", volumeID)
	}
	return toDisk(o.value), nil
}

// RecentDisk implements cloud.Cloud from the observations of the volume batcher, which every wait and read of
// a volume goes through.
func (c *Cloud) RecentDisk(volumeID string) (*cloud.Disk, bool) {
	o, ok := c.volumes.last(volumeID)
	if !ok || !o.found {
		return nil, false
	}
	return toDisk(o.value), true
}

// GetDiskByName implements cloud.Cloud. Disks being deleted are skipped.
func (c *Cloud) GetDiskByName(ctx context.Context, name string) (*cloud.Disk, error) {
	in := &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{filter("tag:"+cloud.TagName, name)}}
	var found *cloud.Disk
	for p := ec2.NewDescribeVolumesPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeVolumes", err)
		}
		for _, v := range page.Volumes {
			if v.State == ec2types.VolumeStateDeleting || v.State == ec2types.VolumeStateDeleted {
				continue
			}
			if found != nil {
				klog.InfoS("Several disks carry one name; using the first", "name", name, "volumeID", found.ID, "other", aws.ToString(v.VolumeId))
				continue
			}
			found = toDisk(v)
		}
	}
	if found == nil {
		return nil, newError("get disk by name", cloud.ErrNotFound, "no disk named %q", name)
	}
	return found, nil
}

// ListDisks implements cloud.Cloud: the disks that carry a CSI name (and this cluster's tag, if set).
func (c *Cloud) ListDisks(ctx context.Context, req cloud.PageRequest) (*cloud.DiskPage, error) {
	// Disks being deleted are gone for the driver's callers: they can no longer be used or published.
	filters := []ec2types.Filter{filter("tag-key", cloud.TagName),
		filter("status", cloud.DiskCreating, cloud.DiskAvailable, cloud.DiskInUse, cloud.DiskError)}
	if c.clusterID != "" {
		filters = append(filters, filter("tag:"+cloud.TagClusterID, c.clusterID))
	}
	vols, next, err := listPage(req, func(token string, size *int32) ([]ec2types.Volume, string, error) {
		out, err := c.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: filters, MaxResults: size, NextToken: nonEmpty(token)})
		if err != nil {
			return nil, "", classify("DescribeVolumes", err)
		}
		return out.Volumes, aws.ToString(out.NextToken), nil
	})
	if err != nil {
		return nil, err
	}
	page := &cloud.DiskPage{NextToken: next}
	for _, v := range vols {
		page.Disks = append(page.Disks, toDisk(v))
	}
	return page, nil
}

// fetchVolumes is the volume batcher's call: one DescribeVolumes with a volume-id filter, which (unlike
// VolumeIds) does not fail as a whole when one of the volumes is gone.
func (c *Cloud) fetchVolumes(ctx context.Context, ids []string) (map[string]ec2types.Volume, error) {
	in := &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{filter("volume-id", ids...)}, MaxResults: aws.Int32(500)}
	out := make(map[string]ec2types.Volume, len(ids))
	mark := c.devices.mark()
	for p := ec2.NewDescribeVolumesPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range page.Volumes {
			out[aws.ToString(v.VolumeId)] = v
		}
	}
	c.devices.observe(mark, attachmentsOf(out))
	return out, nil
}

// attachmentsOf lists the devices volumes hold on instances they are attached or attaching to, for the
// device allocator.
func attachmentsOf(vols map[string]ec2types.Volume) []volumeAttachments {
	out := make([]volumeAttachments, 0, len(vols))
	for id, v := range vols {
		va := volumeAttachments{volumeID: id, devices: map[string]string{}}
		for _, a := range v.Attachments {
			switch a.State {
			case ec2types.VolumeAttachmentStateDetached:
			default:
				// Attaching, attached, detaching and busy attachments all hold their device name.
				va.devices[aws.ToString(a.InstanceId)] = aws.ToString(a.Device)
			}
		}
		out = append(out, va)
	}
	return out
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
