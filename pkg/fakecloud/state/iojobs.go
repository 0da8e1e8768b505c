package state

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// Block I/O (bind or release a device, grow or remove a file, copy a volume into a snapshot) runs on workers of
// its own, never in an API call: advance records the intent as a job under the lock and marks the volume busy;
// once the change that scheduled the job is committed, the job starts on a worker (at most ioWorkers at once,
// so a few long copies cannot starve every other volume of its devices), does its I/O without the lock, then
// applies and commits the outcome. A busy volume's transitions wait, so one volume has one job at a time, while
// jobs of different volumes run side by side. A crash (or Close) before the outcome is committed leaves the
// intent recorded, and the next start replays the job, which the backend makes idempotent.
type jobKind int

const (
	jobAttach jobKind = iota
	jobDetach
	jobResize
	jobDelete
	// jobSnapshotCopy copies a volume's bytes into a pending snapshot's file.
	jobSnapshotCopy
	// jobSnapshotRemove removes a deleted snapshot's file; it holds no volume.
	jobSnapshotRemove
)

// ioWorkers bounds the jobs running at once.
const ioWorkers = 8

// ioTimeout bounds one job's I/O: copies of whole volumes may take minutes.
const ioTimeout = 30 * time.Minute

type ioJob struct {
	kind       jobKind
	volumeID   string
	instanceID string
	snapshotID string
	force      bool
	sizeGiB    int32
	// ctx ends with Close, or when the snapshot being copied is deleted.
	ctx    context.Context
	cancel context.CancelFunc
}

// jobOutcome is what a job's I/O gave; attempt counts the job's failures in a row, this one included.
type jobOutcome struct {
	device  string
	err     error
	attempt int
}

// A job that keeps failing (a backend that cannot bind a device, say) is tried again after a delay that
// doubles with each failure in a row, from stuckPoll up to maxRetryDelay, so a persistent failure costs a few
// retries and log lines an hour rather than ten a second. A busy device (a mounted volume's detach) is not a
// failure: it is polled every stuckPoll, so an unmount is noticed at once.
const maxRetryDelay = 30 * time.Second

// retryKey names a job for counting its failures in a row.
type retryKey struct {
	kind               jobKind
	volumeID, snapshot string
}

func (j ioJob) retryKey() retryKey { return retryKey{j.kind, j.volumeID, j.snapshotID} }

// retried reports whether a failure of the job is tried again (a snapshot's copy fails the snapshot instead).
func (j ioJob) retried() bool { return j.kind != jobSnapshotCopy && j.kind != jobSnapshotRemove }

// retryDelay is the wait after the attempt-th failure in a row.
func retryDelay(attempt int) time.Duration {
	d := stuckPoll
	for i := 1; i < attempt && d < maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryDelay)
}

// countFailure records a job's outcome in its run of failures and says how many failed in a row (0 on success).
func (s *State) countFailure(j ioJob, err error) int {
	var n int
	s.withLock(func() {
		k := j.retryKey()
		if err == nil {
			delete(s.failures, k)
			return
		}
		s.failures[k]++
		n = s.failures[k]
	})
	return n
}

// schedule records a job, to be started once the change that scheduled it is committed, and marks its volume
// busy until the outcome is applied.
func (s *State) schedule(j ioJob) {
	j.ctx, j.cancel = context.WithCancel(s.jobsCtx)
	if j.volumeID != "" {
		s.ioBusy[j.volumeID] = struct{}{}
	}
	if j.kind == jobSnapshotCopy {
		s.copies[j.snapshotID] = j.cancel
	}
	s.jobs = append(s.jobs, j)
}

// busy reports whether the volume must wait: a job on it is in flight, a volume copy reads it, or a snapshot
// of it is not copied yet (its deletion and detachment wait for the copy, as on EBS).
func (s *State) busy(volumeID string) bool {
	_, job := s.ioBusy[volumeID]
	return job || s.copying[volumeID] > 0 || s.uncopied[volumeID] > 0
}

// takeJobs hands the scheduled jobs to a caller about to release the lock.
func (s *State) takeJobs() []ioJob {
	j := s.jobs
	s.jobs = nil
	return j
}

// dropJobs forgets jobs not yet started, after a failed commit undid the state that scheduled them.
func (s *State) dropJobs() {
	for _, j := range s.jobs {
		s.endJob(j)
	}
	s.jobs = nil
}

// endJob releases what schedule took.
func (s *State) endJob(j ioJob) {
	j.cancel()
	if j.volumeID != "" {
		delete(s.ioBusy, j.volumeID)
	}
	if j.kind == jobSnapshotCopy {
		delete(s.copies, j.snapshotID)
	}
}

// start runs committed jobs on workers.
func (s *State) start(jobs []ioJob) {
	for _, j := range jobs {
		s.workers.Add(1)
		go s.runJob(j)
	}
}

// runJob waits for a worker slot, does the job's I/O and applies its outcome. When fakecloud closes meanwhile,
// the outcome is not applied: the intent stays recorded and the next start replays the job, as after a crash.
func (s *State) runJob(j ioJob) {
	defer s.workers.Done()
	select {
	case s.slots <- struct{}{}:
	case <-s.jobsCtx.Done():
		return
	}
	ctx, cancel := context.WithTimeout(j.ctx, ioTimeout)
	out := jobOutcome{err: ctx.Err()}
	if out.err == nil {
		out = s.doJob(ctx, j)
	}
	cancel()
	<-s.slots
	if out.err != nil && !errors.Is(out.err, context.Canceled) {
		// A failed job is tried again once its outcome is applied; the volume stays busy meanwhile, so the
		// wait here spaces the retries (and their log lines).
		wait := stuckPoll
		if j.retried() && !errors.Is(out.err, blockdev.ErrBusy) {
			out.attempt = s.countFailure(j, out.err)
			wait = retryDelay(out.attempt)
		}
		select {
		case <-time.After(wait):
		case <-s.jobsCtx.Done():
		}
	} else if out.err == nil && j.retried() {
		s.countFailure(j, nil)
	}
	if s.jobsCtx.Err() != nil {
		return
	}
	_ = s.step(func(now time.Time) { s.applyJob(now, j, out) })
}

func (s *State) doJob(ctx context.Context, j ioJob) jobOutcome {
	var out jobOutcome
	switch j.kind {
	case jobAttach:
		out.device, out.err = s.backend.Attach(ctx, j.volumeID)
	case jobDetach:
		out.err = s.backend.Detach(ctx, j.volumeID, j.force)
	case jobResize:
		out.err = s.backend.ResizeVolume(ctx, j.volumeID, gib(j.sizeGiB))
	case jobDelete:
		out.err = s.backend.DeleteVolume(ctx, j.volumeID)
	case jobSnapshotCopy:
		out.err = s.backend.CreateSnapshot(ctx, j.snapshotID, j.volumeID)
	case jobSnapshotRemove:
		out.err = s.backend.DeleteSnapshot(ctx, j.snapshotID)
	}
	return out
}

// applyJob records a job's outcome under the lock; the caller commits.
func (s *State) applyJob(now time.Time, j ioJob, out jobOutcome) {
	s.endJob(j)
	switch j.kind {
	case jobSnapshotCopy:
		s.applyCopy(now, j, out.err)
		return
	case jobSnapshotRemove:
		if out.err != nil {
			// The record is gone and the reply stood; the file is an orphan the next start removes.
			klog.ErrorS(out.err, "Removing snapshot file failed", "snapshotID", j.snapshotID)
		}
		return
	}
	v, ok := s.volumes[j.volumeID]
	if !ok {
		return
	}
	s.markPending(kindVolume, j.volumeID)
	err := out.err
	switch j.kind {
	case jobAttach:
		if err != nil {
			klog.ErrorS(err, "Binding block device failed; will retry", "volumeID", v.ID, "instanceID", j.instanceID, "attempt", out.attempt)
			return
		}
		if a := attachmentTo(v, j.instanceID); a != nil {
			// A detach asked for meanwhile keeps its state; it releases the device recorded here.
			a.HostDevice = out.device
			if a.State == AttachAttaching {
				a.State = AttachAttached
				klog.V(2).InfoS("Volume attached", "volumeID", v.ID, "instanceID", a.InstanceID, "device", a.Device, "hostDevice", out.device)
			}
			s.markDirty(kindVolume, v.ID)
		}
	case jobDetach:
		a := attachmentTo(v, j.instanceID)
		switch {
		case a == nil:
		case err == nil:
			s.dropAttachment(now, v, j.instanceID)
		case errors.Is(err, blockdev.ErrBusy):
			if a.State != AttachBusy {
				a.State = AttachBusy
				s.markDirty(kindVolume, v.ID)
			}
		default:
			klog.ErrorS(err, "Releasing block device failed; will retry", "volumeID", v.ID, "attempt", out.attempt)
		}
	case jobResize:
		m, ok := s.modifications[v.ID]
		if !ok || m.State != ModModifying {
			return
		}
		s.markPending(kindModification, v.ID)
		if err == nil {
			s.optimize(v, m)
			return
		}
		if capErr := storageError(err, m.TargetSize); ec2err.HasCode(capErr, ec2err.CodeInsufficientVolumeCapacity) {
			// No room to grow: the modification fails and the volume keeps its size, as on EBS.
			klog.ErrorS(err, "Growing volume failed for lack of capacity", "volumeID", v.ID)
			m.State, m.StatusMessage, m.EndTime = ModFailed, ec2err.As(capErr).Message, now
			s.markDirty(kindModification, v.ID)
			return
		}
		klog.ErrorS(err, "Growing volume failed; will retry", "volumeID", v.ID, "attempt", out.attempt)
	case jobDelete:
		if err != nil {
			klog.ErrorS(err, "Deleting volume file failed; will retry", "volumeID", v.ID, "attempt", out.attempt)
			return
		}
		if v.State == VolumeDeleting {
			s.dropVolume(now, v)
		}
	}
}

// applyCopy records the end of a snapshot's copy: the snapshot completes once its duration has passed too; a
// copy that failed for want of space puts it in state error, as EBS does; a snapshot deleted meanwhile has its
// file removed.
func (s *State) applyCopy(now time.Time, j ioJob, err error) {
	s.markPending(kindVolume, j.volumeID)
	sn, ok := s.snapshots[j.snapshotID]
	switch {
	case !ok:
		// Deleted meanwhile: its file, or what its capture holds, goes.
		s.schedule(ioJob{kind: jobSnapshotRemove, snapshotID: j.snapshotID})
		return
	case !sn.Copying:
		return
	case errors.Is(err, context.Canceled):
		// Cancelled by a DeleteSnapshot whose commit failed: the snapshot is still wanted; copy again.
		s.markPending(kindSnapshot, sn.ID)
		return
	case err != nil:
		klog.ErrorS(err, "Copying volume into snapshot failed", "volumeID", sn.VolumeID, "snapshotID", sn.ID)
		sn.State, sn.StatusMessage = SnapshotError, ec2err.As(storageError(err, sn.VolumeSize)).Message
	default:
		klog.V(2).InfoS("Snapshot copied", "snapshotID", sn.ID, "volumeID", sn.VolumeID)
	}
	s.setCopied(sn)
	s.markDirty(kindSnapshot, sn.ID)
	s.markPending(kindSnapshot, sn.ID)
}

func attachmentTo(v *Volume, instanceID string) *Attachment {
	for i := range v.Attachments {
		if v.Attachments[i].InstanceID == instanceID {
			return &v.Attachments[i]
		}
	}
	return nil
}

// dropAttachment forgets a detached attachment. One its instance's termination ended deletes the volume when
// it was DeleteOnTermination (and no other instance holds the volume), as EC2 does; the instance, if still
// shutting down, is looked at again, since it is terminated once its volumes are off it.
func (s *State) dropAttachment(now time.Time, v *Volume, instanceID string) {
	var dropped Attachment
	kept := v.Attachments[:0]
	for _, a := range v.Attachments {
		if a.InstanceID != instanceID {
			kept = append(kept, a)
		} else {
			dropped = a
		}
	}
	v.Attachments = kept
	s.markDirty(kindVolume, v.ID)
	klog.V(2).InfoS("Volume detached", "volumeID", v.ID, "instanceID", instanceID)
	if _, ok := s.instances[instanceID]; ok {
		s.markPending(kindInstance, instanceID)
	}
	if dropped.Terminated && dropped.DeleteOnTermination && len(kept) == 0 && (v.State == VolumeInUse || v.State == VolumeAvailable) {
		v.State, v.DueAt = VolumeDeleting, now.Add(s.cfg.Durations.VolumeDelete)
		s.markPending(kindVolume, v.ID)
		klog.InfoS("Deleting volume on its instance's termination", "volumeID", v.ID, "instanceID", instanceID)
	}
}
