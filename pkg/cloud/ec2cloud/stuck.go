package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// stuckError is what an attach wait gives for an attachment still attaching past the bound. It never leaves
// the package: unstick turns it into a new attachment or ErrAttachmentStuck.
type stuckError struct {
	device   string
	stuckFor time.Duration
}

func (e *stuckError) Error() string {
	return fmt.Sprintf("attachment as %s still attaching after %s", e.device, e.stuckFor.Round(time.Millisecond))
}

// unstick passes on what an attach gave, unless it is an attachment stuck attaching: that one is detached by
// force, waited for until it is gone, and the disk attached again, once. A second stuck attachment is left as
// it is and answered with ErrAttachmentStuck: the caller's next call finds it past the bound at once (its age
// comes from the cloud's attach time) and unsticks it again, so each call starts over.
func (c *Cloud) unstick(ctx context.Context, volumeID, instanceID string, a *cloud.Attachment, err error) (*cloud.Attachment, error) {
	var stuck *stuckError
	if !errors.As(err, &stuck) {
		return a, err
	}
	klog.InfoS("Attachment stuck attaching; detaching it by force and attaching again", "volumeID", volumeID,
		"instanceID", instanceID, "device", stuck.device, "stuckFor", stuck.stuckFor.Round(time.Millisecond), "bound", c.stuckAfter)
	if err := c.detach(ctx, volumeID, instanceID, true); err != nil {
		return nil, fmt.Errorf("attach disk %s to %s: force-detach the attachment stuck as %s: %w", volumeID, instanceID, stuck.device, err)
	}
	first := stuck.device
	a, err = c.attachOnce(ctx, volumeID, instanceID)
	if !errors.As(err, &stuck) {
		if err == nil {
			klog.InfoS("Attachment made again after a stuck one", "volumeID", volumeID, "instanceID", instanceID,
				"device", a.Device, "stuckDevice", first)
		}
		return a, err
	}
	klog.InfoS("Attachment stuck attaching again after a forced detach; the next attempt detaches it again",
		"volumeID", volumeID, "instanceID", instanceID, "device", stuck.device, "stuckFor", stuck.stuckFor.Round(time.Millisecond))
	return nil, newError("attach disk", cloud.ErrAttachmentStuck,
		"volume %s still attaching to %s as %s after %s, also after the attachment as %s was detached by force",
		volumeID, instanceID, stuck.device, stuck.stuckFor.Round(time.Millisecond), first)
}
