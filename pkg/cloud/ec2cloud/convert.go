package ec2cloud

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// Conversions from SDK types to domain types. SDK types stop here.

func toDisk(v ec2types.Volume) *cloud.Disk {
	d := &cloud.Disk{
		ID:           aws.ToString(v.VolumeId),
		Zone:         aws.ToString(v.AvailabilityZone),
		SizeGiB:      aws.ToInt32(v.Size),
		VolumeType:   string(v.VolumeType),
		IOPS:         aws.ToInt32(v.Iops),
		Throughput:   aws.ToInt32(v.Throughput),
		Encrypted:    aws.ToBool(v.Encrypted),
		KMSKeyID:     aws.ToString(v.KmsKeyId),
		SnapshotID:   aws.ToString(v.SnapshotId),
		SourceDiskID: aws.ToString(v.SourceVolumeId),
		MultiAttach:  aws.ToBool(v.MultiAttachEnabled),
		State:        string(v.State),
		CreateTime:   aws.ToTime(v.CreateTime),
		Tags:         tagMap(v.Tags),
	}
	d.Name = d.Tags[cloud.TagName]
	for _, a := range v.Attachments {
		d.Attachments = append(d.Attachments, toAttachment(a))
	}
	return d
}

func toAttachment(a ec2types.VolumeAttachment) cloud.Attachment {
	return cloud.Attachment{VolumeID: aws.ToString(a.VolumeId), InstanceID: aws.ToString(a.InstanceId),
		Device: aws.ToString(a.Device), State: string(a.State), AttachTime: aws.ToTime(a.AttachTime)}
}

// attachmentTo finds a volume's attachment to an instance.
func attachmentTo(v ec2types.Volume, instanceID string) *ec2types.VolumeAttachment {
	for i := range v.Attachments {
		if aws.ToString(v.Attachments[i].InstanceId) == instanceID {
			return &v.Attachments[i]
		}
	}
	return nil
}

func toSnapshot(s ec2types.Snapshot) *cloud.Snapshot {
	out := &cloud.Snapshot{
		ID:             aws.ToString(s.SnapshotId),
		SourceVolumeID: aws.ToString(s.VolumeId),
		SizeGiB:        aws.ToInt32(s.VolumeSize),
		State:          string(s.State),
		Progress:       parseProgress(aws.ToString(s.Progress)),
		CreationTime:   aws.ToTime(s.StartTime),
		Description:    aws.ToString(s.Description),
		Tags:           tagMap(s.Tags),
	}
	out.Name = out.Tags[cloud.TagSnapshotName]
	out.GroupID = out.Tags[cloud.TagGroupSnapshotID]
	out.ReadyToUse = s.State == ec2types.SnapshotStateCompleted
	if out.ReadyToUse {
		out.Progress = 100
	}
	return out
}

// parseProgress reads EC2's "45%".
func parseProgress(p string) int {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(p), "%"))
	if err != nil {
		return 0
	}
	return n
}

func toModification(m ec2types.VolumeModification) *cloud.Modification {
	return &cloud.Modification{
		VolumeID:         aws.ToString(m.VolumeId),
		State:            string(m.ModificationState),
		StatusMessage:    aws.ToString(m.StatusMessage),
		TargetSizeGiB:    aws.ToInt32(m.TargetSize),
		TargetVolumeType: string(m.TargetVolumeType),
		TargetIOPS:       aws.ToInt32(m.TargetIops),
		TargetThroughput: aws.ToInt32(m.TargetThroughput),
		Progress:         aws.ToInt64(m.Progress),
	}
}

func toInstance(in ec2types.Instance) *cloud.Instance {
	out := &cloud.Instance{
		ID:           aws.ToString(in.InstanceId),
		InstanceType: string(in.InstanceType),
		Devices:      instanceDevices(in),
	}
	out.AttachmentLimit = attachmentLimit(out.InstanceType)
	if in.Placement != nil {
		out.Zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	if in.State != nil {
		out.State = string(in.State.Name)
	}
	return out
}

// instanceDevices maps the device names in use on an instance to their volumes; the root device is in use
// even when no volume is reported for it.
func instanceDevices(in ec2types.Instance) map[string]string {
	devs := map[string]string{}
	if root := aws.ToString(in.RootDeviceName); root != "" {
		devs[root] = ""
	}
	for _, m := range in.BlockDeviceMappings {
		name := aws.ToString(m.DeviceName)
		if name == "" {
			continue
		}
		var vol string
		if m.Ebs != nil {
			vol = aws.ToString(m.Ebs.VolumeId)
		}
		devs[name] = vol
	}
	return devs
}

func tagMap(tags []ec2types.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	out := make(map[string]string, len(tags))
	for _, t := range tags {
		out[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}

// tagList turns tags into EC2 tags sorted by key. The order matters: EC2 fingerprints a ClientToken's request
// with its tags, so a retry must send them in the same order.
func tagList(tags map[string]string) []ec2types.Tag {
	out := make([]ec2types.Tag, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, ec2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

func filter(name string, values ...string) ec2types.Filter {
	return ec2types.Filter{Name: aws.String(name), Values: values}
}
