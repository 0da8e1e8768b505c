package api

import (
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type instanceStateChangeXML struct {
	InstanceID    string           `xml:"instanceId"`
	CurrentState  instanceStateXML `xml:"currentState"`
	PreviousState instanceStateXML `xml:"previousState"`
}

// instanceChangesResponse is the reply of StartInstances, StopInstances and TerminateInstances.
type instanceChangesResponse struct {
	meta
	Instances []instanceStateChangeXML `xml:"instancesSet>item"`
}

func changesOf(changes []state.InstanceStateChange) *instanceChangesResponse {
	out := &instanceChangesResponse{Instances: make([]instanceStateChangeXML, len(changes))}
	for i, c := range changes {
		out.Instances[i] = instanceStateChangeXML{InstanceID: c.InstanceID, CurrentState: instanceStateOf(c.Current), PreviousState: instanceStateOf(c.Previous)}
	}
	return out
}

func (h *Handler) startInstances(p *params) (response, error) {
	ids, dry := p.list("InstanceId"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	changes, err := h.state.StartInstances(ids, dry)
	if err != nil {
		return nil, err
	}
	return changesOf(changes), nil
}

func (h *Handler) stopInstances(p *params) (response, error) {
	// SkipOsShutdown, like Force, stops the instance without waiting for its guest.
	ids, force, dry := p.list("InstanceId"), p.boolean("Force") || p.boolean("SkipOsShutdown"), p.boolean("DryRun")
	if p.boolean("Hibernate") {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "Hibernation is not supported by fakecloud instances."))
	}
	if p.err != nil {
		return nil, p.err
	}
	changes, err := h.state.StopInstances(ids, force, dry)
	if err != nil {
		return nil, err
	}
	return changesOf(changes), nil
}

func (h *Handler) terminateInstances(p *params) (response, error) {
	ids, force, dry := p.list("InstanceId"), p.boolean("Force") || p.boolean("SkipOsShutdown"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	changes, err := h.state.TerminateInstances(ids, force, dry)
	if err != nil {
		return nil, err
	}
	return changesOf(changes), nil
}

// modifyInstanceAttribute serves the one attribute fakecloud models: the DeleteOnTermination of attached volumes
// (BlockDeviceMapping.N.DeviceName with .Ebs.DeleteOnTermination). Any other attribute is refused, not ignored.
func (h *Handler) modifyInstanceAttribute(p *params) (response, error) {
	id, dry := p.required("InstanceId"), p.boolean("DryRun")
	var changes []state.BlockDeviceChange
	for _, i := range p.indexes("BlockDeviceMapping", "DeviceName", "Ebs.DeleteOnTermination", "Ebs.VolumeId", "NoDevice", "VirtualName") {
		base := "BlockDeviceMapping." + strconv.Itoa(i)
		if p.has(base+".NoDevice") || p.has(base+".VirtualName") {
			p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "Only the DeleteOnTermination of attached EBS volumes can be modified."))
			break
		}
		c := state.BlockDeviceChange{Device: p.required(base + ".DeviceName"), VolumeID: p.str(base + ".Ebs.VolumeId")}
		dot := p.boolp(base + ".Ebs.DeleteOnTermination")
		if dot == nil {
			p.fail(ec2err.Missing(base + ".Ebs.DeleteOnTermination"))
			break
		}
		c.DeleteOnTermination = *dot
		changes = append(changes, c)
	}
	if p.err == nil && len(changes) == 0 {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "fakecloud models only the BlockDeviceMapping attribute of instances."))
	}
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.ModifyBlockDevices(id, changes, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}
