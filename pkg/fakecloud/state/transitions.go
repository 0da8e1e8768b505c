package state

import (
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
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
	if s.copying[id] > 0 {
		// A snapshot copy holds the volume's backend lock: its transitions wait for the copy.
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
	return v.State != VolumeCreating && v.State != VolumeDeleting && allAttached(v)
}

func allAttached(v *Volume) bool {
	for _, a := range v.Attachments {
		if a.State != AttachAttached {
			return false
		}
	}
	return true
}

// finishDelete queues the removal of the volume's file, which runs outside the lock and then drops the record.
func (s *State) finishDelete(v *Volume) bool {
	if _, queued := s.removing[v.ID]; !queued {
		s.removing[v.ID] = struct{}{}
		s.removals = append(s.removals, v.ID)
	}
	return false
}

// dropVolume forgets a deleted volume whose file is gone.
func (s *State) dropVolume(v *Volume) {
	delete(s.volumes, v.ID)
	s.volumeIDs.remove(v.ID)
	if v.ClientToken != "" {
		delete(s.tokens, v.ClientToken)
	}
	s.markDirty(kindVolume, v.ID)
	if _, ok := s.modifications[v.ID]; ok {
		delete(s.modifications, v.ID)
		s.markDirty(kindModification, v.ID)
	}
	klog.V(2).InfoS("Volume deleted", "volumeID", v.ID)
}

func (s *State) advanceAttachments(now time.Time, v *Volume) {
	kept := v.Attachments[:0]
	for _, a := range v.Attachments {
		switch a.State {
		case AttachAttaching:
			if due(now, a.DueAt) && !s.stuck(TransitionAttach) {
				ctx, cancel := backendCtx()
				dev, err := s.backend.Attach(ctx, v.ID)
				cancel()
				if err != nil {
					klog.ErrorS(err, "Binding block device failed; will retry", "volumeID", v.ID, "instanceID", a.InstanceID)
				} else {
					a.State, a.HostDevice = AttachAttached, dev
					s.markDirty(kindVolume, v.ID)
					klog.V(2).InfoS("Volume attached", "volumeID", v.ID, "instanceID", a.InstanceID, "device", a.Device, "hostDevice", dev)
				}
			}
		case AttachDetaching, AttachBusy:
			if due(now, a.DueAt) && !s.stuck(TransitionDetach) {
				if s.releaseDevice(v, a) {
					s.markDirty(kindVolume, v.ID)
					klog.V(2).InfoS("Volume detached", "volumeID", v.ID, "instanceID", a.InstanceID)
					continue
				}
				if a.State != AttachBusy {
					a.State = AttachBusy
					s.markDirty(kindVolume, v.ID)
				}
			}
		}
		kept = append(kept, a)
	}
	v.Attachments = kept
}

// releaseDevice unbinds the volume's device when a is the last attachment holding it; it reports whether the
// attachment is gone. A device still in use keeps a non-forced detach busy, as a mounted disk does on EC2.
func (s *State) releaseDevice(v *Volume, a Attachment) bool {
	if a.HostDevice == "" {
		return true
	}
	for _, other := range v.Attachments {
		if other.InstanceID != a.InstanceID && other.HostDevice != "" {
			return true
		}
	}
	ctx, cancel := backendCtx()
	defer cancel()
	err := s.backend.Detach(ctx, v.ID, a.Force)
	switch {
	case err == nil:
		return true
	case errors.Is(err, blockdev.ErrBusy):
		return false
	default:
		klog.ErrorS(err, "Releasing block device failed; will retry", "volumeID", v.ID)
		return false
	}
}

func (s *State) advanceModification(now time.Time, id string) bool {
	m, ok := s.modifications[id]
	if !ok {
		return true
	}
	if s.stuck(TransitionModify) || s.copying[id] > 0 {
		return false
	}
	if m.State == ModModifying && due(now, m.OptimizingAt) {
		v, ok := s.volumes[id]
		if !ok {
			return true
		}
		if m.TargetSize > v.SizeGiB {
			ctx, cancel := backendCtx()
			err := s.backend.ResizeVolume(ctx, id, gib(m.TargetSize))
			cancel()
			if capErr := capacityOrInternal(err, m.TargetSize); ec2err.HasCode(capErr, ec2err.CodeInsufficientVolumeCapacity) {
				// No room to grow: the modification fails and the volume keeps its size, as on EBS.
				klog.ErrorS(err, "Growing volume failed for lack of capacity", "volumeID", id)
				m.State, m.StatusMessage, m.EndTime = ModFailed, ec2err.As(capErr).Message, now
				s.markDirty(kindModification, id)
				return true
			}
			if err != nil {
				klog.ErrorS(err, "Growing volume failed; will retry", "volumeID", id)
				return false
			}
		}
		v.SizeGiB, v.Type, v.Iops, v.Throughput, v.MultiAttach = m.TargetSize, m.TargetType, m.TargetIops, m.TargetThroughput, m.TargetMulti
		m.State = ModOptimizing
		s.markDirty(kindVolume, id)
		s.markDirty(kindModification, id)
	}
	if m.State == ModOptimizing && due(now, m.CompletedAt) {
		m.State, m.Progress, m.EndTime = ModCompleted, 100, now
		s.markDirty(kindModification, id)
	}
	return m.State == ModCompleted || m.State == ModFailed
}

func (s *State) advanceSnapshot(now time.Time, id string) bool {
	sn, ok := s.snapshots[id]
	if !ok {
		return true
	}
	if sn.State == SnapshotPending && due(now, sn.DueAt) && !s.stuck(TransitionSnapshot) {
		sn.State, sn.Progress, sn.CompletionTime = SnapshotCompleted, 100, now
		s.markDirty(kindSnapshot, id)
	}
	return sn.State != SnapshotPending
}

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
		if sn, ok := s.snapshots[k.id]; ok {
			return sn.DueAt, s.stuck(TransitionSnapshot)
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
