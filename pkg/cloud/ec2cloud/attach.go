package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// codeInstanceNotFound is AttachVolume's answer for an instance that does not exist (classified as
// ErrNotFound with the other ".NotFound" codes).
const codeInstanceNotFound = "InvalidInstanceID.NotFound"

// AttachDisk implements cloud.Cloud: allocate a device name, AttachVolume, wait until attached. A name EC2
// says is already in use is marked taken and the next one tried. A disk already attached to the instance
// (a retry, or the SDK replaying an attach whose reply was lost) is adopted rather than failed. An attachment
// stuck attaching is detached by force and made again, once (stuck.go).
func (c *Cloud) AttachDisk(ctx context.Context, volumeID, instanceID string) (*cloud.Attachment, error) {
	a, err := c.attachOnce(ctx, volumeID, instanceID)
	return c.unstick(ctx, volumeID, instanceID, a, err)
}

// attachOnce is one attach: a device name, AttachVolume, and the wait, which gives a *stuckError for an
// attachment still attaching past the bound.
func (c *Cloud) attachOnce(ctx context.Context, volumeID, instanceID string) (*cloud.Attachment, error) {
	for range len(deviceNames) {
		dev, err := c.devices.allocate(ctx, instanceID, volumeID)
		if err != nil {
			return nil, err
		}
		_, err = c.ec2.AttachVolume(ctx, &ec2.AttachVolumeInput{
			VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID), Device: aws.String(dev),
		}, c.retry.forAction("AttachVolume"))
		switch {
		case err == nil:
			klog.V(4).InfoS("AttachVolume accepted", "volumeID", volumeID, "instanceID", instanceID, "device", dev)
			// Counted from the answer, not the request: a stuck attachment is never judged early.
			return c.waitAttached(ctx, volumeID, instanceID, dev, time.Now())
		case isDeviceInUse(err):
			klog.V(2).InfoS("Device name taken on instance; trying the next", "instanceID", instanceID, "device", dev)
			c.devices.takenElsewhere(instanceID, dev)
		case errorCode(err) == codeVolumeInUse:
			c.devices.release(instanceID, volumeID)
			return c.adoptAttachment(ctx, volumeID, instanceID, err)
		case errorCode(err) == codeInstanceNotFound:
			// The instance is gone: this is how a publish to a missing node is found, with no DescribeInstances.
			c.devices.forget(instanceID)
			return nil, classify("AttachVolume", err)
		case errorCode(err) == codeIncorrectInstanceState:
			c.devices.release(instanceID, volumeID)
			return nil, c.instanceStateError(ctx, instanceID, classify("AttachVolume", err))
		default:
			c.devices.release(instanceID, volumeID)
			return nil, classify("AttachVolume", err)
		}
	}
	return nil, newError("attach disk", cloud.ErrLimitExceeded, "no device name left to attach %s to %s", volumeID, instanceID)
}

// instanceStateError explains EC2's IncorrectInstanceState, which it gives for an instance that is
// terminated or shutting down as well as for one that is pending or stopping (a stopped instance takes
// attachments). Only this error path describes the instance: a gone one (or one EC2 no longer knows) is
// ErrInstanceGone, which matches ErrNotFound; a passing state stays ErrIncorrectState, named in the message.
func (c *Cloud) instanceStateError(ctx context.Context, instanceID string, refused error) error {
	state, gone, err := c.instanceGone(ctx, instanceID)
	switch {
	case err != nil:
		return refused
	case !gone:
		return fmt.Errorf("instance %s is %s: %w", instanceID, state, refused)
	}
	// EC2's code is kept for logs, but not its kinds: the instance is gone, not in a passing state.
	return c.instanceGoneError("AttachVolume", cloud.Code(refused), instanceID, state)
}

// instanceGone reads whether the instance is gone: shutting down, terminated, or no longer known to EC2.
// state names it for messages.
func (c *Cloud) instanceGone(ctx context.Context, instanceID string) (state string, gone bool, err error) {
	in, err := c.GetInstance(ctx, instanceID)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return "no longer known", true, nil
	case err != nil:
		return "", false, err
	}
	return in.State, cloud.IsInstanceGone(in.State), nil
}

// instanceGoneError is the answer for an attach to an instance found gone; its device names are forgotten.
func (c *Cloud) instanceGoneError(op, code, instanceID, state string) error {
	c.devices.forget(instanceID)
	e := &cloud.Error{Op: op, Code: code, Message: fmt.Sprintf("instance %s is %s", instanceID, state),
		Kinds: []error{cloud.ErrInstanceGone, cloud.ErrNotFound}}
	if code == "" {
		e.Err = errors.New(e.Message) // Error shows the message only next to a code
	}
	return e
}

// WaitForAttachment implements cloud.Cloud: the caller read the attachment (attaching, under a device) and
// wants it attached, without sending AttachVolume again. Its AttachTime, when the cloud gave one, counts
// towards the stuck bound: an attachment found stuck by an earlier call is unstuck at once.
func (c *Cloud) WaitForAttachment(ctx context.Context, a cloud.Attachment) (*cloud.Attachment, error) {
	if a.VolumeID == "" || a.InstanceID == "" || a.Device == "" {
		return nil, newError("attach disk", cloud.ErrInvalidArgument, "attachment %+v names no volume, instance or device", a)
	}
	c.devices.adopt(a.InstanceID, a.VolumeID, a.Device)
	att, err := c.waitAttached(ctx, a.VolumeID, a.InstanceID, a.Device, startedAt(a.AttachTime))
	return c.unstick(ctx, a.VolumeID, a.InstanceID, att, err)
}

// startedAt is when an attachment found rather than made began: the cloud's attach time, or now when it gave
// none.
func startedAt(attachTime time.Time) time.Time {
	if attachTime.IsZero() {
		return time.Now()
	}
	return attachTime
}

// adoptAttachment handles VolumeInUse: if the disk is attached (or attaching) to this very instance, wait for
// that attachment; otherwise the disk is in use elsewhere, and the error names where.
func (c *Cloud) adoptAttachment(ctx context.Context, volumeID, instanceID string, inUse error) (*cloud.Attachment, error) {
	o, err := c.volumes.get(ctx, volumeID)
	if err != nil {
		return nil, fmt.Errorf("attach disk %s: %w", volumeID, err)
	}
	if o.err != nil {
		return nil, classify("DescribeVolumes", o.err)
	}
	if !o.found {
		return nil, classify("AttachVolume", inUse)
	}
	if a := attachmentTo(o.value, instanceID); a != nil {
		switch a.State {
		case ec2types.VolumeAttachmentStateAttached, ec2types.VolumeAttachmentStateAttaching:
			dev := aws.ToString(a.Device)
			c.devices.adopt(instanceID, volumeID, dev)
			klog.V(2).InfoS("Disk already attached to instance", "volumeID", volumeID, "instanceID", instanceID, "device", dev, "state", a.State)
			return c.waitAttached(ctx, volumeID, instanceID, dev, startedAt(aws.ToTime(a.AttachTime)))
		default:
			// Still detaching from this very instance: not in use elsewhere, just not ready yet.
			return nil, newError("attach disk", cloud.ErrIncorrectState, "volume %s is %s from %s; attach again once it is detached",
				volumeID, a.State, instanceID)
		}
	}
	if !aws.ToBool(o.value.MultiAttachEnabled) && len(o.value.Attachments) > 0 {
		return nil, fmt.Errorf("attach disk %s to %s: %w", volumeID, instanceID, cloud.AttachedElsewhere(ctx, c, toAttachment(o.value.Attachments[0])))
	}
	return nil, classify("AttachVolume", inUse)
}

// waitAttached waits until the disk's attachment to the instance is attached under device. An attachment
// still attaching more than the stuck bound after since gives a *stuckError.
func (c *Cloud) waitAttached(ctx context.Context, volumeID, instanceID, device string, since time.Time) (*cloud.Attachment, error) {
	const op = "attach disk"
	var (
		att  cloud.Attachment
		last = string(ec2types.VolumeAttachmentStateAttaching)
	)
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	// seenAttachment: a look showed the attachment. askedInstance: the instance was read since it went missing.
	var seenAttachment, askedInstance bool
	err := waitFor(ctx, c, c.volumes, waitAttach, volumeID, func(o observation[ec2types.Volume]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeVolumes", o.err), "volume attached", volumeID)
		}
		if !o.found {
			return false, newError(op, cloud.ErrNotFound, "volume %s vanished while attaching to %s", volumeID, instanceID)
		}
		a := attachmentTo(o.value, instanceID)
		if a == nil {
			// Right after AttachVolume, EC2 may not show the attachment yet. One that was seen and is gone, or
			// that is still missing after the grace, is asked about once: an instance that ended takes its
			// attachments with it, and that is NotFound, not a failed attach.
			expired := grace.expired(true, o.at)
			if (seenAttachment || expired) && !askedInstance {
				askedInstance = true
				if state, gone, err := c.instanceGone(ctx, instanceID); err == nil && gone {
					return false, c.instanceGoneError(op, "", instanceID, state)
				}
			}
			if expired {
				return false, newError(op, cloud.ErrFailed, "attachment of %s to %s vanished", volumeID, instanceID)
			}
			return false, nil
		}
		seenAttachment, askedInstance = true, false
		grace.expired(false, o.at)
		last = string(a.State)
		if stuckFor := o.at.Sub(since); a.State == ec2types.VolumeAttachmentStateAttaching && c.stuckAfter > 0 && stuckFor > c.stuckAfter {
			return false, &stuckError{device: aws.ToString(a.Device), stuckFor: stuckFor}
		}
		return attachOutcome(*a, device)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s to %s: attachment still %s: %w", op, volumeID, instanceID, last, err)
		}
		return nil, err
	}
	att = cloud.Attachment{VolumeID: volumeID, InstanceID: instanceID, Device: device, State: cloud.AttachmentAttached}
	klog.V(2).InfoS("Disk attached", "volumeID", volumeID, "instanceID", instanceID, "device", device)
	return &att, nil
}

// attachOutcome judges an attachment while waiting for it: attached under the expected device is done,
// attaching is not yet; anything else (another device, detaching) failed.
func attachOutcome(a ec2types.VolumeAttachment, device string) (bool, error) {
	switch a.State {
	case ec2types.VolumeAttachmentStateAttaching:
		return false, nil
	case ec2types.VolumeAttachmentStateAttached:
		if got := aws.ToString(a.Device); got != device {
			return false, newError("attach disk", cloud.ErrFailed, "volume %s is attached to %s as %s, not %s",
				aws.ToString(a.VolumeId), aws.ToString(a.InstanceId), got, device)
		}
		return true, nil
	default:
		return false, newError("attach disk", cloud.ErrIncorrectState, "attachment of %s to %s is %s while attaching",
			aws.ToString(a.VolumeId), aws.ToString(a.InstanceId), a.State)
	}
}

// DetachDisk implements cloud.Cloud: DetachVolume, then wait until the attachment is gone, then free the
// device name. A disk attached to an instance that is gone (terminated, shutting down, or unknown to EC2) is
// detached as far as the caller is concerned: EC2 ends those attachments itself.
func (c *Cloud) DetachDisk(ctx context.Context, volumeID, instanceID string) error {
	return c.detach(ctx, volumeID, instanceID, false)
}

// detach is DetachDisk, by force when force is set (the instance's OS is not asked to let go: for an
// attachment stuck attaching, which no OS holds yet).
func (c *Cloud) detach(ctx context.Context, volumeID, instanceID string, force bool) error {
	const op = "detach disk"
	in := &ec2.DetachVolumeInput{VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID)}
	if force {
		in.Force = aws.Bool(true)
	}
	if _, err := c.ec2.DetachVolume(ctx, in, c.retry.forAction("DetachVolume")); err != nil {
		if finished, err := c.detachRefused(ctx, volumeID, instanceID, force, err); finished {
			return err
		}
	} else {
		klog.V(4).InfoS("DetachVolume accepted", "volumeID", volumeID, "instanceID", instanceID, "force", force)
	}

	last := string(ec2types.VolumeAttachmentStateDetaching)
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	endPending := c.metrics.detaches.start(volumeID, instanceID)
	err := waitFor(ctx, c, c.volumes, waitDetach, volumeID, func(o observation[ec2types.Volume]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeVolumes", o.err), "volume detached", volumeID)
		}
		if !o.found {
			return true, nil
		}
		a := attachmentTo(o.value, instanceID)
		if a == nil {
			return true, nil
		}
		last = string(a.State)
		done, still := detachOutcome(a.State)
		if done || !still {
			grace.expired(false, o.at)
			return done, nil
		}
		// Attached or attaching after DetachVolume was accepted: EC2 lagging, or someone attached it again.
		if grace.expired(true, o.at) {
			return false, newError(op, cloud.ErrIncorrectState, "volume %s is %s to %s again", volumeID, a.State, instanceID)
		}
		return false, nil
	})
	endPending(err == nil || ctx.Err() == nil)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s from %s: attachment still %s: %w", op, volumeID, instanceID, last, err)
		}
		return err
	}
	c.devices.release(instanceID, volumeID)
	klog.V(2).InfoS("Disk detached", "volumeID", volumeID, "instanceID", instanceID)
	return nil
}

// detachRefused decides what a refused DetachVolume means: finished with err (nil: nothing left to detach),
// or not finished when the attachment is already on its way out, to be waited for like one's own.
func (c *Cloud) detachRefused(ctx context.Context, volumeID, instanceID string, force bool, refused error) (finished bool, err error) {
	switch errorCode(refused) {
	case codeAttachmentNotFound:
		c.devices.release(instanceID, volumeID)
		return true, nil
	case codeInstanceNotFound:
		// An instance EC2 does not know holds no disk.
		klog.V(2).InfoS("Instance does not exist; nothing to detach", "volumeID", volumeID, "instanceID", instanceID)
		c.devices.forget(instanceID)
		return true, nil
	case codeIncorrectState, codeIncorrectInstanceState:
		// EC2 answers IncorrectState when the volume has no attachment at all, and either code when the
		// attachment or the instance is in a state that takes no detach: find out which.
		d, gerr := c.GetDisk(ctx, volumeID)
		if gerr != nil {
			return true, gerr
		}
		a := diskAttachment(d, instanceID)
		switch {
		case a == nil || a.State == cloud.AttachmentDetached:
			c.devices.release(instanceID, volumeID)
			return true, nil
		case a.State == cloud.AttachmentDetaching || a.State == cloud.AttachmentBusy:
			// Already on its way out (the instance ending detaches its disks): wait for it as for our own.
			return false, nil
		case a.State == cloud.AttachmentAttaching && !force && c.stuckAfter > 0 && time.Since(startedAt(a.AttachTime)) > c.stuckAfter:
			klog.InfoS("Detaching an attachment stuck attaching by force", "volumeID", volumeID, "instanceID", instanceID,
				"device", a.Device, "stuckFor", time.Since(a.AttachTime).Round(time.Second))
			return true, c.detach(ctx, volumeID, instanceID, true)
		}
		if state, gone, ierr := c.instanceGone(ctx, instanceID); ierr == nil && gone {
			klog.InfoS("Instance is gone; EC2 ends its attachment", "volumeID", volumeID, "instanceID", instanceID,
				"instanceState", state, "attachmentState", a.State)
			c.devices.forget(instanceID)
			return true, nil
		}
	}
	return true, classify("DetachVolume", refused)
}

// detachOutcome judges an attachment state while waiting for a detach: detached is done; detaching and busy
// (the device still held on the node) are on their way; attached or attaching are not what a detach leads to
// (still reports those).
func detachOutcome(state ec2types.VolumeAttachmentState) (done, still bool) {
	switch state {
	case ec2types.VolumeAttachmentStateDetached:
		return true, false
	case ec2types.VolumeAttachmentStateDetaching, ec2types.VolumeAttachmentStateBusy:
		return false, false
	default:
		return false, true
	}
}

// diskAttachment is the disk's attachment to the instance, or nil.
func diskAttachment(d *cloud.Disk, instanceID string) *cloud.Attachment {
	for i := range d.Attachments {
		if d.Attachments[i].InstanceID == instanceID {
			return &d.Attachments[i]
		}
	}
	return nil
}
