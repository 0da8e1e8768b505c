package state

import (
	"context"
	"slices"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// CreateSnapshotsInput is CreateSnapshots' request: one snapshot of each volume attached to an instance.
type CreateSnapshotsInput struct {
	InstanceID        string
	ExcludeBootVolume bool
	ExcludeVolumeIDs  []string
	Description       string
	Tags              []Tag
	// CopyVolumeTags adds each volume's tags to its snapshot's (CopyTagsFromSource=volume).
	CopyVolumeTags bool
	DryRun         bool
}

// maxExcludedVolumes is EC2's limit on ExcludeDataVolumeIds.
const maxExcludedVolumes = 40

// CreateSnapshots snapshots every volume attached to the instance at one instant, crash-consistent across them,
// as CreateSnapshot does one: the records are planned under the lock, all volumes are captured by one backend
// call (blockdev.CaptureSnapshots: on the fuse backend one copy-on-write barrier across the volumes), and the
// records committed together before the reply. ExcludeBootVolume leaves out the volume at the root device: a
// launched instance's root volume (a registered instance's is not modelled, so it changes nothing there).
func (s *State) CreateSnapshots(in CreateSnapshotsInput) ([]Snapshot, error) {
	var sns []*Snapshot
	err := s.mutate(func(now time.Time) error {
		inst, err := s.instance(in.InstanceID)
		if err != nil {
			return err
		}
		if len(in.ExcludeVolumeIDs) > maxExcludedVolumes {
			return ec2err.New(ec2err.CodeInvalidParameterValue, "At most %d volumes may be excluded.", maxExcludedVolumes)
		}
		for _, id := range in.ExcludeVolumeIDs {
			if err := checkID("vol", ec2err.CodeInvalidVolumeIDMalformed, id); err != nil {
				return err
			}
		}
		if err := checkSnapshotRequest(in.Description, in.Tags); err != nil {
			return err
		}
		vols, err := s.attachedVolumes(inst.ID, in.ExcludeVolumeIDs, in.ExcludeBootVolume)
		if err != nil {
			return err
		}
		for _, v := range vols {
			if in.CopyVolumeTags {
				if err := validateTags(mergeTags(v.Tags, in.Tags)); err != nil {
					return err
				}
			}
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		for _, v := range vols {
			tags := in.Tags
			if in.CopyVolumeTags {
				tags = mergeTags(v.Tags, in.Tags)
			}
			sns = append(sns, s.planSnapshot(now, v, in.Description, tags))
		}
		return nil
	})
	if err != nil {
		s.withLock(func() {
			for _, sn := range sns {
				s.endCapture(sn)
			}
		})
		return nil, err
	}
	if len(sns) == 0 {
		return nil, nil
	}
	byVolume := make(map[string]string, len(sns))
	for _, sn := range sns {
		byVolume[sn.ID] = sn.VolumeID
	}
	ctx, cancel := context.WithTimeout(context.Background(), captureTimeout)
	captures, capErr := s.backend.CaptureSnapshots(ctx, byVolume)
	cancel()
	return s.recordSnapshots(sns, captures, capErr)
}

// attachedVolumes are the volumes attached to the instance, in ID order, but for those excluded; each must be
// settled, as CreateSnapshot asks.
func (s *State) attachedVolumes(instanceID string, exclude []string, excludeRoot bool) ([]*Volume, error) {
	var out []*Volume
	for _, id := range s.volumeIDs.ids {
		v := s.volumes[id]
		a := attachmentTo(v, instanceID)
		if a == nil || a.State != AttachAttached || slices.Contains(exclude, id) || excludeRoot && a.Device == rootDevice {
			continue
		}
		if _, err := s.settledVolume(id); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// mergeTags is the volume's tags with the request's over them (a key in both takes the request's value).
func mergeTags(volume, request []Tag) []Tag {
	out := slices.Clone(request)
	for _, t := range volume {
		if !slices.ContainsFunc(request, func(r Tag) bool { return r.Key == t.Key }) {
			out = append(out, t)
		}
	}
	return out
}
