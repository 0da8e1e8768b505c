package ec2cloud

import (
	"context"
	"fmt"

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
// (a retry, or the SDK replaying an attach whose reply was lost) is adopted rather than failed.
func (c *Cloud) AttachDisk(ctx context.Context, volumeID, instanceID string) (*cloud.Attachment, error) {
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
			return c.waitAttached(ctx, volumeID, instanceID, dev)
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
		default:
			c.devices.release(instanceID, volumeID)
			return nil, classify("AttachVolume", err)
		}
	}
	return nil, newError("attach disk", cloud.ErrLimitExceeded, "no device name left to attach %s to %s", volumeID, instanceID)
}

// WaitForAttachment implements cloud.Cloud: the caller read the attachment (attaching, under a device) and
// wants it attached, without sending AttachVolume again.
func (c *Cloud) WaitForAttachment(ctx context.Context, a cloud.Attachment) (*cloud.Attachment, error) {
	if a.VolumeID == "" || a.InstanceID == "" || a.Device == "" {
		return nil, newError("attach disk", cloud.ErrInvalidArgument, "attachment %+v names no volume, instance or device", a)
	}
	c.devices.adopt(a.InstanceID, a.VolumeID, a.Device)
	return c.waitAttached(ctx, a.VolumeID, a.InstanceID, a.Device)
}

// adoptAttachment handles VolumeInUse: if the disk is attached (or attaching) to this very instance, wait for
// that attachment; otherwise the disk is in use elsewhere.
func (c *Cloud) adoptAttachment(ctx context.Context, volumeID, instanceID string, inUse error) (*cloud.Attachment, error) {
	o, err := c.volumes.get(ctx, volumeID)
	if err != nil {
		return nil, fmt.Errorf("attach disk %s: %w", volumeID, err)
	}
	if o.err != nil {
		return nil, classify("DescribeVolumes", o.err)
	}
	if o.found {
		if a := attachmentTo(o.value, instanceID); a != nil {
			switch a.State {
			case ec2types.VolumeAttachmentStateAttached, ec2types.VolumeAttachmentStateAttaching:
				dev := aws.ToString(a.Device)
				c.devices.adopt(instanceID, volumeID, dev)
				klog.V(2).InfoS("Disk already attached to instance", "volumeID", volumeID, "instanceID", instanceID, "device", dev, "state", a.State)
				return c.waitAttached(ctx, volumeID, instanceID, dev)
			default:
				// Still detaching from this very instance: not in use elsewhere, just not ready yet.
				return nil, newError("attach disk", cloud.ErrIncorrectState, "volume %s is %s from %s; attach again once it is detached",
					volumeID, a.State, instanceID)
			}
		}
	}
	return nil, classify("AttachVolume", inUse)
}

// waitAttached waits until the disk's attachment to the instance is attached under device.
func (c *Cloud) waitAttached(ctx context.Context, volumeID, instanceID, device string) (*cloud.Attachment, error) {
	const op = "attach disk"
	var (
		att  cloud.Attachment
		last = string(ec2types.VolumeAttachmentStateAttaching)
	)
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	err := waitFor(ctx, c, c.volumes, waitAttach, volumeID, func(o observation[ec2types.Volume]) (bool, error) {
		if o.err != nil {
			return false, transientPollError(classify("DescribeVolumes", o.err), "volume attached", volumeID)
		}
		if !o.found {
			return false, newError(op, cloud.ErrNotFound, "volume %s vanished while attaching to %s", volumeID, instanceID)
		}
		a := attachmentTo(o.value, instanceID)
		if a == nil {
			// Right after AttachVolume, EC2 may not show the attachment yet.
			if grace.expired(true, o.at) {
				return false, newError(op, cloud.ErrFailed, "attachment of %s to %s vanished", volumeID, instanceID)
			}
			return false, nil
		}
		grace.expired(false, o.at)
		last = string(a.State)
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
// device name.
func (c *Cloud) DetachDisk(ctx context.Context, volumeID, instanceID string) error {
	const op = "detach disk"
	_, err := c.ec2.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(volumeID), InstanceId: aws.String(instanceID)},
		c.retry.forAction("DetachVolume"))
	if err != nil {
		switch errorCode(err) {
		case codeAttachmentNotFound:
			c.devices.release(instanceID, volumeID)
			return nil
		case codeIncorrectState:
			// EC2 answers IncorrectState when the volume has no attachment at all; make sure that is why.
			d, gerr := c.GetDisk(ctx, volumeID)
			if gerr != nil {
				return gerr
			}
			if !attachedTo(d, instanceID) {
				c.devices.release(instanceID, volumeID)
				return nil
			}
		}
		return classify("DetachVolume", err)
	}
	klog.V(4).InfoS("DetachVolume accepted", "volumeID", volumeID, "instanceID", instanceID)

	last := string(ec2types.VolumeAttachmentStateDetaching)
	grace := graceClock{grace: c.wait.ConsistencyGrace}
	err = waitFor(ctx, c, c.volumes, waitDetach, volumeID, func(o observation[ec2types.Volume]) (bool, error) {
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

func attachedTo(d *cloud.Disk, instanceID string) bool {
	for _, a := range d.Attachments {
		if a.InstanceID == instanceID && a.State != cloud.AttachmentDetached {
			return true
		}
	}
	return false
}
