package state

import (
	"time"

	"k8s.io/klog/v2"
)

// advance moves every pending resource whose transition is due (and not held by a fault) to its next state.
func (s *State) advance(now time.Time) {
	for k := range s.pending {
		var settled bool
		switch k.kind {
		case kindVolume:
			settled = s.advanceVolume(now, k.id)
		case kindSnapshot:
			settled = s.advanceSnapshot(now, k.id)
		case kindModification:
			settled = s.advanceModification(now, k.id)
		case kindInstance:
			settled = s.advanceInstance(now, k.id)
		case kindFastRestore:
			settled = s.advanceFastRestore(now, k.id)
		default:
			settled = true
		}
		if settled {
			delete(s.pending, k)
		}
	}
}

func due(now, at time.Time) bool { return !now.Before(at) }

// advanceVolume runs due volume and attachment transitions; it reports whether nothing is left pending.
func (s *State) advanceVolume(now time.Time, id string) bool {
	v, ok := s.volumes[id]
	if !ok {
		return true
	}
	if s.busy(id) {
		// Block I/O on the volume is in flight; its transitions wait for the outcome.
		return false
	}
	switch v.State {
	case VolumeCreating:
		if due(now, v.DueAt) && !s.stuck(TransitionVolumeCreate) {
			v.State = VolumeAvailable
			s.markDirty(kindVolume, id)
		}
	case VolumeDeleting:
		if due(now, v.DueAt) && !s.stuck(TransitionVolumeDelete) {
			return s.finishDelete(v)
		}
	}
	s.advanceAttachments(now, v)
	if v.State == VolumeAvailable || v.State == VolumeInUse {
		want := VolumeAvailable
		if len(v.Attachments) > 0 {
			want = VolumeInUse
		}
		if v.State != want {
			v.State = want
			s.markDirty(kindVolume, id)
		}
	}
	return v.State != VolumeCreating && v.State != VolumeDeleting && allSettled(v)
}

// allSettled reports whether no attachment of v has a transition to make: each is attached, or held attaching
// by a counted fault until a detach (which marks the volume pending again).
func allSettled(v *Volume) bool {
	for _, a := range v.Attachments {
		if a.State != AttachAttached && (a.State != AttachAttaching || !a.Held) {
			return false
		}
	}
	return true
}

// finishDelete schedules the removal of the volume's file; the record goes once the file is gone.
func (s *State) finishDelete(v *Volume) bool {
	s.schedule(ioJob{kind: jobDelete, volumeID: v.ID})
	return false
}

// dropVolume forgets a deleted volume whose file is gone; its ClientToken stays bound to it for a while.
func (s *State) dropVolume(now time.Time, v *Volume) {
	delete(s.volumes, v.ID)
	s.volumeIDs.remove(v.ID)
	for k := range s.failures {
		if k.volumeID == v.ID {
			delete(s.failures, k)
		}
	}
	if v.ClientToken != "" {
		delete(s.tokens, v.ClientToken)
		s.bury(now, v)
	}
	s.markDirty(kindVolume, v.ID)
	if _, ok := s.modifications[v.ID]; ok {
		delete(s.modifications, v.ID)
		s.markDirty(kindModification, v.ID)
	}
	klog.V(2).InfoS("Volume deleted", "volumeID", v.ID)
}

// advanceAttachments schedules the device work of due attachments, one job per volume at a time; an
// attachment that holds no device of its own detaches at once.
func (s *State) advanceAttachments(now time.Time, v *Volume) {
	for _, a := range v.Attachments {
		switch a.State {
		case AttachAttaching:
			if !a.Held && due(now, a.DueAt) && !s.stuck(TransitionAttach) {
				s.schedule(ioJob{kind: jobAttach, volumeID: v.ID, instanceID: a.InstanceID})
				return
			}
		case AttachDetaching, AttachBusy:
			if !due(now, a.DueAt) || s.stuck(TransitionDetach) {
				continue
			}
			if holdsDevice(v, a) {
				s.schedule(ioJob{kind: jobDetach, volumeID: v.ID, instanceID: a.InstanceID, force: a.Force || s.guestDown(a.InstanceID)})
				return
			}
			s.dropAttachment(now, v, a.InstanceID)
			s.advanceAttachments(now, v)
			return
		}
	}
}

// holdsDevice reports whether detaching a must release the volume's device: it has one, and no other
// attachment of the volume still uses it. A device in use keeps a non-forced detach busy, as a mounted disk
// does on EC2.
func holdsDevice(v *Volume, a Attachment) bool {
	if a.HostDevice == "" {
		return false
	}
	for _, other := range v.Attachments {
		if other.InstanceID != a.InstanceID && other.HostDevice != "" {
			return false
		}
	}
	return true
}

func (s *State) advanceModification(now time.Time, id string) bool {
	m, ok := s.modifications[id]
	if !ok {
		return true
	}
	if s.stuck(TransitionModify) || s.busy(id) {
		return false
	}
	if m.State == ModModifying && due(now, m.OptimizingAt) {
		v, ok := s.volumes[id]
		if !ok {
			return true
		}
		if m.TargetSize > v.SizeGiB {
			s.schedule(ioJob{kind: jobResize, volumeID: id, sizeGiB: m.TargetSize})
			return false
		}
		s.optimize(v, m)
	}
	if m.State == ModOptimizing && due(now, m.CompletedAt) {
		m.State, m.Progress, m.EndTime = ModCompleted, 100, now
		s.markDirty(kindModification, id)
	}
	return m.State == ModCompleted || m.State == ModFailed
}

// optimize gives the volume its new shape: from optimizing on, the new size is usable, as on EBS.
func (s *State) optimize(v *Volume, m *Modification) {
	v.SizeGiB, v.Type, v.Iops, v.Throughput, v.MultiAttach = m.TargetSize, m.TargetType, m.TargetIops, m.TargetThroughput, m.TargetMulti
	m.State = ModOptimizing
	s.markDirty(kindVolume, v.ID)
	s.markDirty(kindModification, v.ID)
}

// advanceSnapshot starts a pending snapshot's copy once no other job holds its volume, and completes the
// snapshot once the copy is done and its duration has passed.
func (s *State) advanceSnapshot(now time.Time, id string) bool {
	sn, ok := s.snapshots[id]
	if !ok || sn.State != SnapshotPending {
		return true
	}
	if sn.Copying {
		_, running := s.copies[id]
		if _, held := s.ioBusy[sn.VolumeID]; !running && !held {
			s.schedule(ioJob{kind: jobSnapshotCopy, snapshotID: id, volumeID: sn.VolumeID})
		}
		return false
	}
	if due(now, sn.DueAt) && !s.stuck(TransitionSnapshot) {
		sn.State, sn.Progress, sn.CompletionTime = SnapshotCompleted, 100, now
		s.markDirty(kindSnapshot, id)
		klog.V(2).InfoS("Snapshot completed", "snapshotID", id, "volumeID", sn.VolumeID)
	}
	return sn.State != SnapshotPending
}

// setCopied records that a snapshot's copy has ended (done or failed), which frees its volume.
func (s *State) setCopied(sn *Snapshot) {
	if !sn.Copying {
		return
	}
	sn.Copying = false
	if s.uncopied[sn.VolumeID]--; s.uncopied[sn.VolumeID] <= 0 {
		delete(s.uncopied, sn.VolumeID)
	}
	s.markPending(kindVolume, sn.VolumeID)
}

// untimed is the due time of a transition that waits for block I/O, whose end kicks the loop.
var untimed = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// dueOf is when a pending resource next needs a look, and whether a fault or a busy device holds it.
func (s *State) dueOf(k pendingKey) (time.Time, bool) {
	switch k.kind {
	case kindVolume:
		v, ok := s.volumes[k.id]
		if !ok {
			return time.Time{}, false
		}
		switch v.State {
		case VolumeCreating:
			return v.DueAt, s.stuck(TransitionVolumeCreate)
		case VolumeDeleting:
			return v.DueAt, s.stuck(TransitionVolumeDelete)
		}
		var earliest time.Time
		held := false
		for _, a := range v.Attachments {
			switch a.State {
			case AttachAttaching:
				if a.Held {
					continue
				}
				held = held || s.stuck(TransitionAttach)
			case AttachBusy:
				held = true
			case AttachDetaching:
				held = held || s.stuck(TransitionDetach)
			default:
				continue
			}
			if earliest.IsZero() || a.DueAt.Before(earliest) {
				earliest = a.DueAt
			}
		}
		return earliest, held
	case kindSnapshot:
		if sn, ok := s.snapshots[k.id]; ok && !sn.Copying {
			return sn.DueAt, s.stuck(TransitionSnapshot)
		}
		// A copy in flight ends with a kick; nothing to time.
		return untimed, false
	case kindInstance:
		return s.instanceDue(k.id)
	case kindFastRestore:
		if f, ok := s.fastRestores[k.id]; ok {
			return f.DueAt, false
		}
	case kindModification:
		if m, ok := s.modifications[k.id]; ok {
			if m.State == ModModifying {
				return m.OptimizingAt, s.stuck(TransitionModify)
			}
			return m.CompletedAt, s.stuck(TransitionModify)
		}
	}
	return time.Time{}, false
}

// gib converts GiB to bytes.
func gib(n int32) int64 { return int64(n) << 30 }
