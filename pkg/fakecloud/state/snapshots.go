package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// CreateSnapshotInput is CreateSnapshot's request.
type CreateSnapshotInput struct {
	VolumeID    string
	Description string
	Tags        []Tag
	DryRun      bool
}

// maxDescription is EC2's limit on a snapshot's description, in characters.
const maxDescription = 255

// CreateSnapshot fixes the snapshot's point in time before it answers, as EBS captures the instant of the
// request: a first step checks the request and reserves the ID, holding the volume's transitions; the backend
// then captures the volume outside the state lock (flush, then a reflink or the fuse backend's copy-on-write
// barrier: blockdev.Capture); the record is committed last, so the reply is sent for an instant already fixed
// and a state already durable. A worker copies the rest meanwhile (iojobs.go), and the snapshot completes once
// the copy is done and its configured duration has passed. The volume's deletion, detachment, attachment and
// growth wait for the copy. A capture that fails (a device whose flush hangs past blockdev.FlushBound) records
// the snapshot in state error. After a crash a copy runs again only where the volume could not change
// meanwhile (no device at the request) or the capture is on disk; a copy-on-write session died with the
// process, and its snapshot goes to error rather than take a later instant.
func (s *State) CreateSnapshot(in CreateSnapshotInput) (Snapshot, error) {
	var sn *Snapshot
	err := s.mutate(func(now time.Time) error {
		v, err := s.settledVolume(in.VolumeID)
		if err != nil {
			return err
		}
		if err := checkSnapshotRequest(in.Description, in.Tags); err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		sn = s.planSnapshot(now, v, in.Description, in.Tags)
		return nil
	})
	if err != nil {
		if sn != nil {
			// Reserved, then the commit failed.
			s.withLock(func() { s.endCapture(sn) })
		}
		return Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), captureTimeout)
	capture, capErr := s.backend.CaptureSnapshot(ctx, sn.ID, sn.VolumeID)
	cancel()
	out, err := s.recordSnapshots([]*Snapshot{sn}, map[string]blockdev.Capture{sn.ID: capture}, capErr)
	if err != nil {
		return Snapshot{}, err
	}
	return out[0], nil
}

// checkSnapshotRequest checks what CreateSnapshot and CreateSnapshots are asked besides their volumes.
func checkSnapshotRequest(description string, tags []Tag) error {
	if utf8.RuneCountInString(description) > maxDescription {
		return ec2err.InvalidValue("description", description, fmt.Sprintf("The description must be at most %d characters.", maxDescription))
	}
	return validateTags(tags)
}

// planSnapshot makes a snapshot's record of the volume, reserves its ID and holds the volume's transitions
// until the record is in (as a volume copy does), under the lock.
func (s *State) planSnapshot(now time.Time, v *Volume, description string, tags []Tag) *Snapshot {
	sn := &Snapshot{
		ID:       s.uniqueID("snap", func(id string) bool { _, ok := s.snapshots[id]; _, r := s.reserved[id]; return ok || r }),
		VolumeID: v.ID, State: SnapshotPending, StartTime: now, VolumeSize: v.SizeGiB, Description: description,
		Encrypted: v.Encrypted, KmsKeyID: v.KmsKeyID, OwnerID: s.cfg.AccountID, Zone: v.Zone,
		Tags: slices.Clone(tags),
	}
	s.reserved[sn.ID] = struct{}{}
	s.copying[v.ID]++
	return sn
}

// recordSnapshots commits planned snapshots once their points in time are captured (captures by snapshot ID;
// capErr failed them all, which records them in state error). The captures of snapshots whose commit failed go.
func (s *State) recordSnapshots(sns []*Snapshot, captures map[string]blockdev.Capture, capErr error) ([]Snapshot, error) {
	out := make([]Snapshot, 0, len(sns))
	err := s.mutate(func(now time.Time) error {
		for _, sn := range sns {
			s.endCapture(sn)
			sn.DueAt = now.Add(s.cfg.Durations.Snapshot)
			capture := captures[sn.ID]
			switch {
			case capErr != nil:
				klog.ErrorS(capErr, "Capturing the volume's point in time failed", "snapshotID", sn.ID, "volumeID", sn.VolumeID)
				sn.State, sn.StatusMessage = SnapshotError, captureFailure(capErr)
			case capture == blockdev.CaptureLive:
				klog.InfoS("Snapshot's point in time is its copy's, not its request's: the loop backend over a filesystem "+
					"without reflink has no instant copy of an attached volume", "snapshotID", sn.ID, "volumeID", sn.VolumeID)
			}
			sn.Capture = string(capture)
			if sn.State == SnapshotPending && capture != blockdev.CaptureComplete {
				sn.Copying = true
				s.uncopied[sn.VolumeID]++
			}
			s.snapshots[sn.ID] = sn
			s.snapshotIDs.insert(sn.ID)
			s.markDirty(kindSnapshot, sn.ID)
			s.markPending(kindSnapshot, sn.ID)
			out = append(out, sn.view(now))
			klog.V(2).InfoS("Snapshot started", "snapshotID", sn.ID, "volumeID", sn.VolumeID, "capture", capture)
		}
		return nil
	})
	if err != nil && capErr == nil {
		// Not recorded: the captures go (a file made is an orphan anyway; a session must end).
		ctx, cancel := backendCtx()
		defer cancel()
		for _, sn := range sns {
			if derr := s.backend.DeleteSnapshot(ctx, sn.ID); derr != nil {
				klog.ErrorS(derr, "Removing the capture of an unrecorded snapshot failed", "snapshotID", sn.ID)
			}
		}
		return nil, err
	}
	return out, err
}

// endCapture ends the reservation of a snapshot's ID and its hold on the volume's transitions.
func (s *State) endCapture(sn *Snapshot) {
	delete(s.reserved, sn.ID)
	s.endCopyOf(sn.VolumeID)
	s.markPending(kindVolume, sn.VolumeID)
}

// captureTimeout bounds a capture: the flush's own bound, and the barrier's sync of the volume's file.
const captureTimeout = 2 * blockdev.FlushBound

// captureFailure is the statusMessage of a snapshot whose point in time could not be taken.
func captureFailure(err error) string {
	if errors.Is(err, blockdev.ErrFlushTimeout) {
		return fmt.Sprintf("The volume's device did not finish flushing within %v; the snapshot was not taken.", blockdev.FlushBound)
	}
	return ec2err.As(storageError(err, 0)).Message
}

// lostInstant is the statusMessage of a snapshot whose point in time was held only by the process that
// stopped before its copy completed.
const lostInstant = "fakecloud stopped while the snapshot was being copied, and its point in time was kept only in memory; the snapshot was not taken."

// endCopyOf ends a volume copy's hold on its source volume.
func (s *State) endCopyOf(volumeID string) {
	if s.copying[volumeID]--; s.copying[volumeID] <= 0 {
		delete(s.copying, volumeID)
	}
}

// DeleteSnapshot removes a snapshot's record, then a worker removes its file. A pending snapshot may be deleted,
// as on EC2 (its creation is abandoned): its copy is cancelled, and the copy's job removes what it made. A file
// left by a crash in between has no record and is removed at the next start.
func (s *State) DeleteSnapshot(id string, dryRun bool) error {
	return s.mutate(func(now time.Time) error {
		if err := checkID("snap", ec2err.CodeInvalidSnapshotIDMalformed, id); err != nil {
			return err
		}
		sn, ok := s.snapshots[id]
		if !ok {
			return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{id})
		}
		if err := checkUnlocked(sn, now); err != nil {
			return err
		}
		if dryRun {
			return ec2err.DryRun()
		}
		s.setCopied(sn)
		s.dropFastRestores(id)
		delete(s.snapshots, id)
		s.snapshotIDs.remove(id)
		s.markDirty(kindSnapshot, id)
		if cancel, copying := s.copies[id]; copying {
			cancel()
			return nil
		}
		s.schedule(ioJob{kind: jobSnapshotRemove, snapshotID: id})
		return nil
	})
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
	"start-time":  func(sn *Snapshot) []string { return timeValues(sn.StartTime) },
	// Only snapshots of Amazon's own accounts (amazon, aws-backup, ...) have an owner alias; fakecloud holds
	// none, so the filter matches nothing.
	"owner-alias": noValues[Snapshot],
	// Every fakecloud snapshot and copy is made at once, by standard transfer; none is time-based.
	"transfer-type": func(*Snapshot) []string { return []string{"standard"} },
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
		// The tier follows from the tiering and the time of the request.
		byTier := withField(snapshotFields, "storage-tier", func(sn *Snapshot) []string {
			tier, _, _ := sn.Tiering.at(now)
			return []string{tier}
		})
		if match, err = byTier.compile(in.Filters, func(sn *Snapshot) []Tag { return sn.Tags }); err != nil {
			return
		}
		if err = checkRestorableBy(in.RestorableBy); err != nil {
			return
		}
		owned := func(sn *Snapshot) bool {
			if !s.restorableBy(sn, in.RestorableBy) {
				return false
			}
			if len(in.OwnerIDs) == 0 {
				return true
			}
			return slices.Contains(in.OwnerIDs, "self") || slices.Contains(in.OwnerIDs, sn.OwnerID)
		}
		var ids []string
		if ids, next, err = s.listSnapshots(in.DescribeInput, func(sn *Snapshot) bool { return owned(sn) && match(sn) }); err != nil {
			return
		}
		for _, id := range ids {
			out = append(out, s.snapshots[id].view(now))
		}
	})
	return out, next, err
}

// listSnapshots selects the IDs of a Describe* of snapshots: the IDs asked (each must exist; paging is refused
// with them), or a page of all, keeping those keep accepts.
func (s *State) listSnapshots(in DescribeInput, keep func(*Snapshot) bool) ([]string, string, error) {
	if len(in.IDs) == 0 {
		return snapshotPages.page(&s.snapshotIDs, in.Page, false, func(id string) bool { return keep(s.snapshots[id]) })
	}
	ids, err := s.knownIDs(in.IDs, "snap", ec2err.CodeInvalidSnapshotIDMalformed, ec2err.CodeInvalidSnapshotNotFound, "snapshot",
		func(id string) bool { _, ok := s.snapshots[id]; return ok })
	if err != nil {
		return nil, "", err
	}
	if _, err := snapshotPages.pageSize(in.Page, true); err != nil {
		return nil, "", err
	}
	return slices.DeleteFunc(ids, func(id string) bool { return !keep(s.snapshots[id]) }), "", nil
}

func (sn *Snapshot) view(now time.Time) Snapshot {
	c := *sn
	c.Tags = slices.Clone(sn.Tags)
	c.SharedWith = slices.Clone(sn.SharedWith)
	if sn.Lock != nil {
		l := *sn.Lock
		c.Lock = &l
	}
	if sn.Tiering != nil {
		tg := *sn.Tiering
		c.Tiering = &tg
	}
	c.StorageTier, _, c.RestoreExpiry = sn.Tiering.at(now)
	if c.State == SnapshotPending {
		// Below 100 until completed, which waits for the copy too.
		c.Progress = int(progress(sn.StartTime, sn.DueAt, now))
	}
	return c
}
