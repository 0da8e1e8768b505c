package state

import (
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// CreateSnapshotInput is CreateSnapshot's request.
type CreateSnapshotInput struct {
	VolumeID    string
	Description string
	Tags        []Tag
	DryRun      bool
}

// CreateSnapshot copies the volume's bytes (point in time) outside the state lock, so a large copy stalls no
// other call, then records the snapshot pending until its configured duration has passed.
func (s *State) CreateSnapshot(in CreateSnapshotInput) (Snapshot, error) {
	var planned *Snapshot
	err := s.mutate(func(now time.Time) error {
		v, err := s.settledVolume(in.VolumeID)
		if err != nil {
			return err
		}
		if err := validateTags(in.Tags); err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		planned = &Snapshot{
			ID:       s.uniqueID("snap", func(id string) bool { _, ok := s.snapshots[id]; return ok }),
			VolumeID: v.ID, State: SnapshotPending, StartTime: now, VolumeSize: v.SizeGiB, Description: in.Description,
			Encrypted: v.Encrypted, KmsKeyID: v.KmsKeyID, OwnerID: s.cfg.AccountID, Zone: v.Zone,
			Tags: slices.Clone(in.Tags), DueAt: now.Add(s.cfg.Durations.Snapshot),
		}
		s.reserved[planned.ID] = struct{}{}
		s.copying[v.ID]++
		return nil
	})
	if err != nil {
		if planned != nil {
			s.withLock(func() { s.endCopy(planned) })
		}
		return Snapshot{}, err
	}
	ctx, cancel := ioCtx()
	copyErr := s.backend.CreateSnapshot(ctx, planned.ID, planned.VolumeID)
	cancel()
	var out Snapshot
	err = s.mutate(func(now time.Time) error {
		s.endCopy(planned)
		if copyErr != nil {
			klog.ErrorS(copyErr, "Copying volume for snapshot failed", "volumeID", planned.VolumeID, "snapshotID", planned.ID)
			return capacityOrInternal(copyErr, planned.VolumeSize)
		}
		sn := planned
		s.snapshots[sn.ID] = sn
		s.snapshotIDs.insert(sn.ID)
		s.markDirty(kindSnapshot, sn.ID)
		s.markPending(kindSnapshot, sn.ID)
		out = sn.view(now)
		klog.V(2).InfoS("Snapshot created", "snapshotID", sn.ID, "volumeID", sn.VolumeID)
		return nil
	})
	return out, err
}

// endCopy ends a snapshot copy's reservation and lets its volume's transitions run again.
func (s *State) endCopy(sn *Snapshot) {
	delete(s.reserved, sn.ID)
	s.endCopyOf(sn.VolumeID)
}

// endCopyOf ends one copy's hold on a volume (a snapshot's or a volume copy's).
func (s *State) endCopyOf(volumeID string) {
	if s.copying[volumeID]--; s.copying[volumeID] <= 0 {
		delete(s.copying, volumeID)
	}
}

// DeleteSnapshot removes a snapshot's record, then its bytes outside the lock. A file left by a crash in
// between has no record and is removed at the next start.
func (s *State) DeleteSnapshot(id string, dryRun bool) error {
	err := s.mutate(func(time.Time) error {
		if err := checkID("snap", ec2err.CodeInvalidSnapshotIDMalformed, id); err != nil {
			return err
		}
		if _, ok := s.snapshots[id]; !ok {
			return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{id})
		}
		if dryRun {
			return ec2err.DryRun()
		}
		delete(s.snapshots, id)
		s.snapshotIDs.remove(id)
		s.markDirty(kindSnapshot, id)
		return nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := ioCtx()
	defer cancel()
	if err := s.backend.DeleteSnapshot(ctx, id); err != nil {
		// The record is gone and the reply stands; the file is an orphan the next start removes.
		klog.ErrorS(err, "Removing snapshot file failed", "snapshotID", id)
	}
	return nil
}

// DescribeSnapshotsInput adds owner and restorable-by selectors to a Describe* request.
type DescribeSnapshotsInput struct {
	DescribeInput
	OwnerIDs     []string
	RestorableBy []string
}

var snapshotFields = fields[Snapshot]{
	"snapshot-id": func(sn *Snapshot) []string { return []string{sn.ID} },
	"volume-id":   func(sn *Snapshot) []string { return []string{sn.VolumeID} },
	"status":      func(sn *Snapshot) []string { return []string{sn.State} },
	"owner-id":    func(sn *Snapshot) []string { return []string{sn.OwnerID} },
	"description": func(sn *Snapshot) []string { return []string{sn.Description} },
	"volume-size": func(sn *Snapshot) []string { return []string{strconv.Itoa(int(sn.VolumeSize))} },
	"encrypted":   func(sn *Snapshot) []string { return []string{strconv.FormatBool(sn.Encrypted)} },
	"progress":    func(sn *Snapshot) []string { return []string{strconv.Itoa(sn.Progress) + "%"} },
	"start-time":  func(sn *Snapshot) []string { return []string{sn.StartTime.UTC().Format(time.RFC3339)} },
}

// DescribeSnapshots lists snapshots by ID, owner or filter, a page at a time.
func (s *State) DescribeSnapshots(in DescribeSnapshotsInput) ([]Snapshot, string, error) {
	var (
		out  []Snapshot
		next string
		err  error
	)
	s.read(func(now time.Time) {
		var match func(*Snapshot) bool
		if match, err = snapshotFields.compile(in.Filters, func(sn *Snapshot) []Tag { return sn.Tags }); err != nil {
			return
		}
		owned := func(sn *Snapshot) bool {
			if len(in.OwnerIDs) == 0 {
				return true
			}
			return slices.Contains(in.OwnerIDs, "self") || slices.Contains(in.OwnerIDs, sn.OwnerID)
		}
		var ids []string
		if len(in.IDs) > 0 {
			if ids, err = s.knownIDs(in.IDs, "snap", ec2err.CodeInvalidSnapshotIDMalformed, ec2err.CodeInvalidSnapshotNotFound, "snapshot",
				func(id string) bool { _, ok := s.snapshots[id]; return ok }); err != nil {
				return
			}
			if _, err = snapshotPages.pageSize(in.Page, true); err != nil {
				return
			}
		} else {
			ids, next, err = snapshotPages.page(&s.snapshotIDs, in.Page, false, func(id string) bool {
				sn := s.snapshots[id]
				return owned(sn) && match(sn)
			})
		}
		for _, id := range ids {
			if sn := s.snapshots[id]; owned(sn) && match(sn) {
				out = append(out, sn.view(now))
			}
		}
	})
	return out, next, err
}

func (sn *Snapshot) view(now time.Time) Snapshot {
	c := *sn
	c.Tags = slices.Clone(sn.Tags)
	if c.State == SnapshotPending {
		c.Progress = int(progress(sn.StartTime, sn.DueAt, now))
	}
	return c
}
