package state

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// An instance's life, as EC2 runs it: StartInstances, StopInstances and TerminateInstances move it through
// pending (code 0), running (16), stopping (64), stopped (80), shutting-down (32) and terminated (48), each
// transitional state lasting its Durations entry. A stopped instance keeps its attachments (its volumes stay
// in-use, attached), takes new ones and lets them go; since no OS holds its devices, their release is forced.
// Termination ends every attachment: the volumes become available (deleted, when the attachment was
// DeleteOnTermination) and their devices are released as by a forced detach. The instance is terminated once its
// attachments are gone, stays visible for Config.TerminatedRetention, then vanishes.

// InstanceStateChange is one instance's entry in a Start/Stop/TerminateInstances reply.
type InstanceStateChange struct {
	InstanceID string
	Current    string
	Previous   string
}

// reasonUserShutdown is EC2's stateReason code of an instance its user stopped or terminated.
const reasonUserShutdown = "Client.UserInitiatedShutdown"

// StateReasonMessage is the message EC2 gives with a stateReason code.
func StateReasonMessage(code string) string {
	if code == reasonUserShutdown {
		return "Client.UserInitiatedShutdown: User initiated shutdown"
	}
	return code
}

// instanceStep checks one instance of a request and returns the change to make (nil: none, as when the
// instance is already where it was asked to go).
type instanceStep func(in *Instance) (apply func(now time.Time), err error)

// changeInstances checks every instance of a request before changing any, as EC2 refuses a request as a whole.
func (s *State) changeInstances(ids []string, dryRun bool, step instanceStep) ([]InstanceStateChange, error) {
	var out []InstanceStateChange
	err := s.mutate(func(now time.Time) error {
		if len(ids) == 0 {
			return ec2err.Missing("InstanceId")
		}
		known, err := s.knownInstances(ids)
		if err != nil {
			return err
		}
		applies := make([]func(time.Time), len(known))
		for i, id := range known {
			if applies[i], err = step(s.instances[id]); err != nil {
				return err
			}
		}
		if dryRun {
			return ec2err.DryRun()
		}
		for i, id := range known {
			in := s.instances[id]
			change := InstanceStateChange{InstanceID: id, Previous: in.State}
			if applies[i] != nil {
				applies[i](now)
			}
			change.Current = in.State
			out = append(out, change)
		}
		return nil
	})
	return out, err
}

// StartInstances starts stopped instances; running (or pending) ones are answered as they are.
func (s *State) StartInstances(ids []string, dryRun bool) ([]InstanceStateChange, error) {
	return s.changeInstances(ids, dryRun, func(in *Instance) (func(time.Time), error) {
		switch in.State {
		case InstanceStopped:
			return func(now time.Time) {
				s.setInstanceState(now, in, InstancePending, now.Add(s.cfg.Durations.InstanceStart))
			}, nil
		case InstancePending, InstanceRunning:
			return nil, nil
		}
		return nil, ec2err.New(ec2err.CodeIncorrectInstanceState, "The instance '%s' is not in a state from which it can be started.", in.ID)
	})
}

// StopInstances stops running instances; stopped (or stopping) ones are answered as they are. Force skips the
// guest's shutdown: the instance is stopped at once.
func (s *State) StopInstances(ids []string, force, dryRun bool) ([]InstanceStateChange, error) {
	return s.changeInstances(ids, dryRun, func(in *Instance) (func(time.Time), error) {
		switch in.State {
		case InstanceRunning:
			return func(now time.Time) {
				due := now.Add(s.cfg.Durations.InstanceStop)
				if force {
					due = now
				}
				s.setInstanceState(now, in, InstanceStopping, due)
			}, nil
		case InstanceStopping:
			if !force {
				return nil, nil
			}
			return func(now time.Time) { s.hurry(now, in) }, nil
		case InstanceStopped:
			return nil, nil
		}
		return nil, ec2err.New(ec2err.CodeIncorrectInstanceState, "This instance '%s' is not in a state from which it can be stopped.", in.ID)
	})
}

// TerminateInstances terminates instances in any state; terminating (or terminated) ones are answered as they
// are. Force skips the guest's shutdown.
func (s *State) TerminateInstances(ids []string, force, dryRun bool) ([]InstanceStateChange, error) {
	return s.changeInstances(ids, dryRun, func(in *Instance) (func(time.Time), error) {
		switch in.State {
		case InstanceShuttingDown:
			if force {
				return func(now time.Time) { s.hurry(now, in) }, nil
			}
			return nil, nil
		case InstanceTerminated:
			return nil, nil
		}
		return func(now time.Time) { s.terminate(now, in, force) }, nil
	})
}

// hurry ends an instance's transitional state now.
func (s *State) hurry(now time.Time, in *Instance) {
	in.DueAt = now
	s.markDirty(kindInstance, in.ID)
	s.markPending(kindInstance, in.ID)
}

// terminate starts an instance's termination and ends its attachments. Shared by TerminateInstances and the
// admin removal of an instance.
func (s *State) terminate(now time.Time, in *Instance, force bool) {
	due := now.Add(s.cfg.Durations.InstanceTerminate)
	if force {
		due = now
	}
	s.setInstanceState(now, in, InstanceShuttingDown, due)
	for _, vid := range s.volumeIDs.ids {
		v := s.volumes[vid]
		for i := range v.Attachments {
			a := &v.Attachments[i]
			if a.InstanceID != in.ID {
				continue
			}
			if a.State != AttachDetaching && a.State != AttachBusy {
				a.State = AttachDetaching
			}
			a.DueAt, a.Force, a.Terminated = now, true, true
			s.markDirty(kindVolume, vid)
			s.markPending(kindVolume, vid)
		}
	}
}

func (s *State) setInstanceState(now time.Time, in *Instance, state string, due time.Time) {
	in.State, in.DueAt = state, due
	switch state {
	case InstanceStopping, InstanceShuttingDown:
		in.StateReason = reasonUserShutdown
		in.TransitionReason = "User initiated (" + now.UTC().Format("2006-01-02 15:04:05 GMT") + ")"
	case InstancePending, InstanceRunning:
		in.StateReason, in.TransitionReason = "", ""
	}
	s.markDirty(kindInstance, in.ID)
	s.markPending(kindInstance, in.ID)
	klog.InfoS("Instance state changed", "instanceID", in.ID, "state", state)
}

// advanceInstance ends a due transitional state; it reports whether nothing is left pending.
func (s *State) advanceInstance(now time.Time, id string) bool {
	in, ok := s.instances[id]
	if !ok {
		return true
	}
	if !due(now, in.DueAt) {
		return false
	}
	switch in.State {
	case InstancePending:
		s.recordStartDevices(in)
		s.settleInstance(in, InstanceRunning, time.Time{})
	case InstanceStopping:
		s.settleInstance(in, InstanceStopped, time.Time{})
	case InstanceShuttingDown:
		if len(s.attachmentsOf(id)) > 0 {
			// Terminated once its volumes are off it; the last detach kicks it.
			return false
		}
		if s.cfg.TerminatedRetention <= 0 {
			s.forgetInstance(id)
			return true
		}
		s.settleInstance(in, InstanceTerminated, now.Add(s.cfg.TerminatedRetention))
		return false
	case InstanceTerminated:
		s.forgetInstance(id)
		return true
	}
	return in.State == InstanceRunning || in.State == InstanceStopped
}

func (s *State) settleInstance(in *Instance, state string, due time.Time) {
	in.State, in.DueAt = state, due
	s.markDirty(kindInstance, in.ID)
	klog.InfoS("Instance state changed", "instanceID", in.ID, "state", state)
}

// forgetInstance drops an instance's record: a terminated one past its retention, or one the admin removed.
func (s *State) forgetInstance(id string) {
	delete(s.instances, id)
	s.instanceIDs.remove(id)
	s.markDirty(kindInstance, id)
}

// instanceDue is when a pending instance next needs a look; a shutting-down one whose volumes are still
// detaching is held (looked at again soon).
func (s *State) instanceDue(id string) (time.Time, bool) {
	in, ok := s.instances[id]
	if !ok {
		return time.Time{}, false
	}
	return in.DueAt, in.State == InstanceShuttingDown && len(s.attachmentsOf(id)) > 0
}

// guestDown reports whether no OS holds the instance's devices: it is stopped, being terminated or gone. Its
// detaches are then forced, as EC2 completes them without the guest.
func (s *State) guestDown(id string) bool {
	in, ok := s.instances[id]
	return !ok || in.State == InstanceStopped || in.State == InstanceShuttingDown || in.State == InstanceTerminated
}

// attachable reports whether volumes may be attached to the instance: not once it is being terminated.
func attachable(in *Instance) error {
	if in.State == InstanceShuttingDown || in.State == InstanceTerminated {
		return ec2err.New(ec2err.CodeIncorrectInstanceState, "Instance '%s' is '%s'; volumes attach only to running or stopped instances.", in.ID, in.State)
	}
	return nil
}

// BlockDeviceChange is one BlockDeviceMapping entry of ModifyInstanceAttribute: the DeleteOnTermination of the
// volume attached at Device (VolumeID, when given, must be the one there).
type BlockDeviceChange struct {
	Device              string
	VolumeID            string
	DeleteOnTermination bool
}

// ModifyBlockDevices sets DeleteOnTermination on an instance's attachments, all or none.
func (s *State) ModifyBlockDevices(instanceID string, changes []BlockDeviceChange, dryRun bool) error {
	return s.mutate(func(time.Time) error {
		if _, err := s.instance(instanceID); err != nil {
			return err
		}
		type target struct {
			volumeID string
			value    bool
		}
		var targets []target
		for _, c := range changes {
			a := s.attachmentAt(instanceID, c.Device)
			if a == nil && c.Device == rootDevice {
				// A registered instance's root volume is not modelled; EC2 would set its flag, which nothing here reads.
				continue
			}
			if a == nil || c.VolumeID != "" && a.VolumeID != c.VolumeID {
				return ec2err.New(ec2err.CodeInvalidInstanceAttributeValue, "No device is currently mapped at %s", c.Device)
			}
			targets = append(targets, target{a.VolumeID, c.DeleteOnTermination})
		}
		if dryRun {
			return ec2err.DryRun()
		}
		for _, t := range targets {
			if a := attachmentTo(s.volumes[t.volumeID], instanceID); a != nil {
				a.DeleteOnTermination = t.value
				s.markDirty(kindVolume, t.volumeID)
			}
		}
		return nil
	})
}

// attachmentAt finds the instance's attachment under a device name.
func (s *State) attachmentAt(instanceID, device string) *Attachment {
	for _, id := range s.volumeIDs.ids {
		v := s.volumes[id]
		for i := range v.Attachments {
			if a := &v.Attachments[i]; a.InstanceID == instanceID && a.Device == device {
				return a
			}
		}
	}
	return nil
}
