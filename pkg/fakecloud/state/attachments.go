package state

import (
	"regexp"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// maxMultiAttach is how many instances one io1/io2 volume may be attached to.
const maxMultiAttach = 16

// rootDevice is every instance's root device: a registered instance's root volume is not modelled but keeps it
// taken; a launched instance's root volume is attached there. Either way AttachVolume cannot take it, and the
// attachment limit (data volumes besides the root) does not count it.
const rootDevice = "/dev/xvda"

// deviceName matches the Linux device names EC2 accepts for EBS: /dev/sd[b-z], /dev/sd[b-z][1-15],
// /dev/xvd[b-z], /dev/xvd[a-z][a-z] and the like.
var deviceName = regexp.MustCompile(`^/dev/(sd[a-z]([1-9]|1[0-5])?|xvd[a-z]{1,2}|sd[a-z][a-z])$`)

// AttachInput is AttachVolume's request.
type AttachInput struct {
	VolumeID   string
	InstanceID string
	Device     string
	DryRun     bool
}

// AttachVolume starts attaching a volume to an instance under a device name.
func (s *State) AttachVolume(in AttachInput) (Attachment, error) {
	var out Attachment
	err := s.mutate(func(now time.Time) error {
		v, err := s.volume(in.VolumeID)
		if err != nil {
			return err
		}
		inst, err := s.instance(in.InstanceID)
		if err != nil {
			return err
		}
		if err := s.checkAttach(v, inst, in.Device); err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		a := Attachment{VolumeID: v.ID, InstanceID: inst.ID, Device: in.Device, State: AttachAttaching,
			AttachTime: now, DueAt: now.Add(s.cfg.Durations.Attach)}
		if a.Held = s.hold(TransitionAttach); a.Held {
			klog.InfoS("Attachment held attaching by a stuck fault until it is detached", "volumeID", v.ID, "instanceID", inst.ID, "device", in.Device)
		}
		v.Attachments = append(v.Attachments, a)
		v.State = VolumeInUse
		s.markDirty(kindVolume, v.ID)
		s.markPending(kindVolume, v.ID)
		out = a
		return nil
	})
	return out, err
}

func (s *State) checkAttach(v *Volume, inst *Instance, device string) error {
	if err := attachable(inst); err != nil {
		return err
	}
	if v.Zone != inst.Zone {
		return ec2err.New(ec2err.CodeInvalidVolumeZoneMismatch,
			"The volume '%s' is not in the same availability zone as instance '%s'", v.ID, inst.ID)
	}
	if v.State != VolumeAvailable && v.State != VolumeInUse {
		return ec2err.New(ec2err.CodeIncorrectState, "%s is not 'available'.", v.ID)
	}
	if m, ok := s.modifications[v.ID]; ok && m.State == ModModifying {
		return ec2err.New(ec2err.CodeOperationNotPermitted, "Cannot attach volume %s when it is in modification state: MODIFYING", v.ID)
	}
	if len(v.Attachments) > 0 {
		switch {
		case !v.MultiAttach:
			return ec2err.New(ec2err.CodeVolumeInUse, "%s is already attached to an instance", v.ID)
		case len(v.Attachments) >= maxMultiAttach:
			return ec2err.New(ec2err.CodeVolumeInUse, "%s is already attached to %d instances, the most Multi-Attach allows", v.ID, maxMultiAttach)
		}
		for _, a := range v.Attachments {
			if a.InstanceID == inst.ID {
				return ec2err.New(ec2err.CodeVolumeInUse, "%s is already attached to instance %s", v.ID, inst.ID)
			}
		}
	}
	if !deviceName.MatchString(device) {
		return ec2err.InvalidValue("device", device, device+" is not a valid EBS device name.")
	}
	used := s.attachmentsOf(inst.ID)
	for _, a := range used {
		if a.Device == device {
			return deviceInUse(device)
		}
	}
	if device == rootDevice {
		return deviceInUse(device)
	}
	data := 0
	for _, a := range used {
		if a.Device != rootDevice {
			data++
		}
	}
	if data >= inst.AttachmentLimit {
		return ec2err.New(ec2err.CodeAttachmentLimitExceeded, "Instance %s has reached its limit of %d attached volumes", inst.ID, inst.AttachmentLimit)
	}
	return nil
}

func deviceInUse(device string) error {
	return ec2err.New(ec2err.CodeInvalidParameterValue, "Invalid value '%s' for unixDevice. Attachment point %s is already in use", device, device)
}

// attachmentsOf lists an instance's attachments in every state, since a detaching volume still holds its slot.
func (s *State) attachmentsOf(instanceID string) []Attachment {
	var out []Attachment
	for _, id := range s.volumeIDs.ids {
		for _, a := range s.volumes[id].Attachments {
			if a.InstanceID == instanceID {
				out = append(out, a)
			}
		}
	}
	return out
}

// DetachInput is DetachVolume's request.
type DetachInput struct {
	VolumeID   string
	InstanceID string
	Device     string
	Force      bool
	DryRun     bool
}

// DetachVolume starts detaching a volume. The device is released when the transition falls due; while the
// device is still in use (mounted) the attachment stays busy unless Force is set.
func (s *State) DetachVolume(in DetachInput) (Attachment, error) {
	var out Attachment
	err := s.mutate(func(now time.Time) error {
		v, err := s.volume(in.VolumeID)
		if err != nil {
			return err
		}
		if in.InstanceID != "" {
			if _, err := s.instance(in.InstanceID); err != nil {
				return err
			}
		}
		i, err := findAttachment(v, in)
		if err != nil {
			return err
		}
		if in.DryRun {
			return ec2err.DryRun()
		}
		a := &v.Attachments[i]
		if a.State != AttachDetaching && a.State != AttachBusy {
			a.State, a.DueAt = AttachDetaching, now.Add(s.cfg.Durations.Detach)
		}
		// Force only escalates, as on EC2: a later plain detach does not undo it.
		a.Force = a.Force || in.Force
		s.markDirty(kindVolume, v.ID)
		s.markPending(kindVolume, v.ID)
		out = *a
		if out.State == AttachBusy {
			out.State = AttachDetaching
		}
		return nil
	})
	return out, err
}

func findAttachment(v *Volume, in DetachInput) (int, error) {
	if len(v.Attachments) == 0 {
		return 0, ec2err.New(ec2err.CodeIncorrectState, "Volume '%s' is in the '%s' state.", v.ID, v.State)
	}
	if in.InstanceID == "" && len(v.Attachments) > 1 {
		return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "Volume '%s' is attached to several instances; the parameter InstanceId is required.", v.ID)
	}
	for i, a := range v.Attachments {
		if (in.InstanceID == "" || a.InstanceID == in.InstanceID) && (in.Device == "" || a.Device == in.Device) {
			return i, nil
		}
	}
	return 0, ec2err.New(ec2err.CodeInvalidAttachmentNotFound, "Volume '%s' is not attached to instance '%s'.", v.ID, in.InstanceID)
}
