package state

import (
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Block I/O of due transitions (bind or release a device, grow or remove a file) runs outside the state lock:
// advance records the intent as a job and marks the volume busy, the caller runs the job once it has let go
// of the lock, and the outcome is applied and committed under the lock again. A busy volume's transitions
// wait, so one volume has one job at a time; a crash before the outcome is committed replays the job, which
// the backend makes idempotent.
type jobKind int

const (
	jobAttach jobKind = iota
	jobDetach
	jobResize
	jobDelete
)

type ioJob struct {
	kind       jobKind
	volumeID   string
	instanceID string
	force      bool
	sizeGiB    int32
}

// schedule records a job and marks its volume busy until the outcome is applied.
func (s *State) schedule(j ioJob) {
	s.ioBusy[j.volumeID] = struct{}{}
	s.jobs = append(s.jobs, j)
}

// busy reports whether block I/O on the volume is in flight: a job, or a snapshot copy reading it.
func (s *State) busy(volumeID string) bool {
	_, job := s.ioBusy[volumeID]
	return job || s.copying[volumeID] > 0
}

// takeJobs hands the scheduled jobs to a caller about to release the lock.
func (s *State) takeJobs() []ioJob {
	j := s.jobs
	s.jobs = nil
	return j
}

// dropJobs forgets jobs not yet handed out, after a failed commit undid the state that scheduled them.
func (s *State) dropJobs() {
	for _, j := range s.jobs {
		delete(s.ioBusy, j.volumeID)
	}
	s.jobs = nil
}

// runJobs does the jobs' I/O without the lock, then applies their outcomes in one commit.
func (s *State) runJobs(jobs []ioJob) {
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := ioCtx()
	defer cancel()
	devs, errs := make([]string, len(jobs)), make([]error, len(jobs))
	for i, j := range jobs {
		switch j.kind {
		case jobAttach:
			devs[i], errs[i] = s.backend.Attach(ctx, j.volumeID)
		case jobDetach:
			errs[i] = s.backend.Detach(ctx, j.volumeID, j.force)
		case jobResize:
			errs[i] = s.backend.ResizeVolume(ctx, j.volumeID, gib(j.sizeGiB))
		case jobDelete:
			errs[i] = s.backend.DeleteVolume(ctx, j.volumeID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i, j := range jobs {
		delete(s.ioBusy, j.volumeID)
		if v, ok := s.volumes[j.volumeID]; ok {
			s.applyJob(now, v, j, devs[i], errs[i])
			s.markPending(kindVolume, j.volumeID)
		}
	}
	_ = s.commit()
}

func (s *State) applyJob(now time.Time, v *Volume, j ioJob, dev string, err error) {
	switch j.kind {
	case jobAttach:
		if err != nil {
			klog.ErrorS(err, "Binding block device failed; will retry", "volumeID", v.ID, "instanceID", j.instanceID)
			return
		}
		if a := attachmentTo(v, j.instanceID); a != nil {
			// A detach asked for meanwhile keeps its state; it releases the device recorded here.
			a.HostDevice = dev
			if a.State == AttachAttaching {
				a.State = AttachAttached
				klog.V(2).InfoS("Volume attached", "volumeID", v.ID, "instanceID", a.InstanceID, "device", a.Device, "hostDevice", dev)
			}
			s.markDirty(kindVolume, v.ID)
		}
	case jobDetach:
		a := attachmentTo(v, j.instanceID)
		switch {
		case a == nil:
		case err == nil:
			s.dropAttachment(v, j.instanceID)
		case errors.Is(err, blockdev.ErrBusy):
			if a.State != AttachBusy {
				a.State = AttachBusy
				s.markDirty(kindVolume, v.ID)
			}
		default:
			klog.ErrorS(err, "Releasing block device failed; will retry", "volumeID", v.ID)
		}
	case jobResize:
		m, ok := s.modifications[v.ID]
		if !ok || m.State != ModModifying {
			return
		}
		if capErr := capacityOrInternal(err, m.TargetSize); err != nil && ec2err.HasCode(capErr, ec2err.CodeInsufficientVolumeCapacity) {
			// No room to grow: the modification fails and the volume keeps its size, as on EBS.
			klog.ErrorS(err, "Growing volume failed for lack of capacity", "volumeID", v.ID)
			m.State, m.StatusMessage, m.EndTime = ModFailed, ec2err.As(capErr).Message, now
			s.markDirty(kindModification, v.ID)
			return
		}
		if err != nil {
			klog.ErrorS(err, "Growing volume failed; will retry", "volumeID", v.ID)
			s.markPending(kindModification, v.ID)
			return
		}
		s.optimize(v, m)
		s.markPending(kindModification, v.ID)
	case jobDelete:
		if err != nil {
			klog.ErrorS(err, "Deleting volume file failed; will retry", "volumeID", v.ID)
			return
		}
		if v.State == VolumeDeleting {
			s.dropVolume(v)
		}
	}
}

func attachmentTo(v *Volume, instanceID string) *Attachment {
	for i := range v.Attachments {
		if v.Attachments[i].InstanceID == instanceID {
			return &v.Attachments[i]
		}
	}
	return nil
}

// dropAttachment forgets a detached attachment.
func (s *State) dropAttachment(v *Volume, instanceID string) {
	kept := v.Attachments[:0]
	for _, a := range v.Attachments {
		if a.InstanceID != instanceID {
			kept = append(kept, a)
		}
	}
	v.Attachments = kept
	s.markDirty(kindVolume, v.ID)
	klog.V(2).InfoS("Volume detached", "volumeID", v.ID, "instanceID", instanceID)
}
