package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// CopySnapshotInput is CopySnapshot's request within the region.
type CopySnapshotInput struct {
	SourceSnapshotID string
	SourceRegion     string
	Description      string
	Encrypted        bool
	KmsKeyID         string
	Tags             []Tag
	DryRun           bool
}

// copyVolumeID is the volume ID EC2 reports for a snapshot copy ("an arbitrary source volume ID").
const copyVolumeID = "vol-ffffffff"

// CopySnapshot copies a completed snapshot within the region. The copy's file is made before the reply (an
// instant link of the source's immutable file: blockdev's CopySnapshot), outside the state lock with the new ID
// reserved, and the record is committed last, in state pending; it completes after the snapshot duration, as a
// snapshot does. A copy of an encrypted snapshot is encrypted, with the source's key unless another is named;
// an unencrypted one is encrypted when asked or by default.
func (s *State) CopySnapshot(in CopySnapshotInput) (Snapshot, error) {
	var sn *Snapshot
	err := s.mutate(func(now time.Time) error {
		if in.SourceRegion != s.cfg.Region {
			return ec2err.InvalidValue("SourceRegion", in.SourceRegion,
				fmt.Sprintf("The region '%s' does not exist or is not served here; snapshots are copied within %s.", in.SourceRegion, s.cfg.Region))
		}
		if err := checkID("snap", ec2err.CodeInvalidSnapshotIDMalformed, in.SourceSnapshotID); err != nil {
			return err
		}
		src, ok := s.snapshots[in.SourceSnapshotID]
		if !ok {
			return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{in.SourceSnapshotID})
		}
		if src.State != SnapshotCompleted {
			return ec2err.New(ec2err.CodeIncorrectState, "Snapshot '%s' is in state '%s'; only a completed snapshot can be copied.", src.ID, src.State)
		}
		if src.archived(now) {
			return errArchived(src.ID)
		}
		if utf8.RuneCountInString(in.Description) > maxDescription {
			return ec2err.InvalidValue("description", in.Description, fmt.Sprintf("The description must be at most %d characters.", maxDescription))
		}
		if err := checkKmsKeyID(in.KmsKeyID); err != nil {
			return err
		}
		if in.KmsKeyID != "" && !in.Encrypted {
			return errKmsWithoutEncrypted
		}
		if err := validateTags(in.Tags); err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		sn = &Snapshot{
			ID:       s.uniqueID("snap", func(id string) bool { _, ok := s.snapshots[id]; _, r := s.reserved[id]; return ok || r }),
			VolumeID: copyVolumeID, State: SnapshotPending, VolumeSize: src.VolumeSize, Description: in.Description,
			OwnerID: s.cfg.AccountID, Zone: src.Zone, Tags: slices.Clone(in.Tags), SourceSnapshotID: src.ID,
			Capture: string(blockdev.CaptureComplete),
		}
		sn.Encrypted, sn.KmsKeyID = s.encryption(in.Encrypted, in.KmsKeyID, src.Encrypted, src.KmsKeyID)
		s.reserved[sn.ID] = struct{}{}
		return nil
	})
	if err != nil {
		if sn != nil {
			s.withLock(func() { delete(s.reserved, sn.ID) })
		}
		return Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	copyErr := s.backend.CopySnapshot(ctx, sn.ID, sn.SourceSnapshotID)
	cancel()
	var out Snapshot
	err = s.mutate(func(now time.Time) error {
		// The reservation ends first, so that a failed commit removes the file as an orphan.
		delete(s.reserved, sn.ID)
		if copyErr != nil {
			klog.ErrorS(copyErr, "Copying snapshot file failed", "snapshotID", sn.ID, "sourceSnapshotID", sn.SourceSnapshotID)
			if errors.Is(copyErr, blockdev.ErrNotFound) {
				// Deleted meanwhile.
				return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{sn.SourceSnapshotID})
			}
			return storageError(copyErr, 0)
		}
		sn.StartTime, sn.DueAt = now, now.Add(s.cfg.Durations.Snapshot)
		s.snapshots[sn.ID] = sn
		s.snapshotIDs.insert(sn.ID)
		s.markDirty(kindSnapshot, sn.ID)
		s.markPending(kindSnapshot, sn.ID)
		out = sn.view(now)
		klog.V(2).InfoS("Snapshot copy started", "snapshotID", sn.ID, "sourceSnapshotID", sn.SourceSnapshotID)
		return nil
	})
	return out, err
}
