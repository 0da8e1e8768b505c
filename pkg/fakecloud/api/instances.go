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
	return instanceChanges(p, false, func(ids []string, _, dry bool) ([]state.InstanceStateChange, error) {
		return h.state.StartInstances(ids, dry)
	})
}

func (h *Handler) stopInstances(p *params) (response, error) {
	if p.boolean("Hibernate") {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "Hibernation is not supported by fakecloud instances."))
	}
	return instanceChanges(p, true, h.state.StopInstances)
}

func (h *Handler) terminateInstances(p *params) (response, error) {
	return instanceChanges(p, true, h.state.TerminateInstances)
}

// instanceChanges reads what Start, Stop and TerminateInstances share (InstanceId.N and DryRun; with forcible,
// Stop's and Terminate's Force — or SkipOsShutdown, which like Force skips the guest's shutdown; StartInstances
// has neither), makes the change and answers it.
func instanceChanges(p *params, forcible bool, change func(ids []string, force, dry bool) ([]state.InstanceStateChange, error)) (response, error) {
	ids, dry := p.list("InstanceId"), p.boolean("DryRun")
	force := forcible && (p.boolean("Force") || p.boolean("SkipOsShutdown"))
	if p.err != nil {
		return nil, p.err
	}
	changes, err := change(ids, force, dry)
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
