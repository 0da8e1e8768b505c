package api

import (
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type createSnapshotResponse struct {
	meta
	snapshotXML
}

func (h *Handler) createSnapshot(p *params) (response, error) {
	in := state.CreateSnapshotInput{VolumeID: p.required("VolumeId"), Description: p.str("Description"),
		Tags: p.tagSpecs("snapshot"), DryRun: p.boolean("DryRun")}
	if p.err != nil {
		return nil, p.err
	}
	sn, err := h.state.CreateSnapshot(in)
	if err != nil {
		return nil, err
	}
	return &createSnapshotResponse{snapshotXML: snapshotOf(sn)}, nil
}

func (h *Handler) deleteSnapshot(p *params) (response, error) {
	id, dry := p.required("SnapshotId"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.DeleteSnapshot(id, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

type describeSnapshotsResponse struct {
	meta
	Snapshots []snapshotXML `xml:"snapshotSet>item"`
	NextToken string        `xml:"nextToken,omitempty"`
}

func (h *Handler) describeSnapshots(p *params) (response, error) {
	in := state.DescribeSnapshotsInput{DescribeInput: p.describe("SnapshotId"), OwnerIDs: p.list("Owner"), RestorableBy: p.list("RestorableBy")}
	if p.err != nil {
		return nil, p.err
	}
	snaps, next, err := h.state.DescribeSnapshots(in)
	if err != nil {
		return nil, err
	}
	out := &describeSnapshotsResponse{Snapshots: make([]snapshotXML, len(snaps)), NextToken: next}
	for i, sn := range snaps {
		out.Snapshots[i] = snapshotOf(sn)
	}
	return out, nil
}

func (h *Handler) createTags(p *params) (response, error) {
	ids, tags, dry := p.list("ResourceId"), p.tags("Tag"), p.boolean("DryRun")
	if p.err == nil && len(ids) == 0 {
		p.fail(ec2err.Missing("resourceIdSet"))
	}
	if p.err == nil && len(tags) == 0 {
		p.fail(ec2err.Missing("Tag"))
	}
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.CreateTags(ids, tags, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

func (h *Handler) deleteTags(p *params) (response, error) {
	ids, sel, dry := p.list("ResourceId"), p.tagSelectors("Tag"), p.boolean("DryRun")
	if p.err == nil && len(ids) == 0 {
		p.fail(ec2err.Missing("resourceIdSet"))
	}
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.DeleteTags(ids, sel, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

type instanceStateXML struct {
	Code int32  `xml:"code"`
	Name string `xml:"name"`
}

func instanceStateOf(name string) instanceStateXML {
	return instanceStateXML{Code: state.InstanceStateCode(name), Name: name}
}

type placementXML struct {
	AvailabilityZone   string `xml:"availabilityZone"`
	AvailabilityZoneID string `xml:"availabilityZoneId,omitempty"`
	Tenancy            string `xml:"tenancy"`
}

type ebsXML struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type blockDeviceXML struct {
	DeviceName string `xml:"deviceName"`
	Ebs        ebsXML `xml:"ebs"`
}

type stateReasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type instanceXML struct {
	InstanceID     string           `xml:"instanceId"`
	ImageID        string           `xml:"imageId"`
	State          instanceStateXML `xml:"instanceState"`
	Reason         string           `xml:"reason"`
	AmiLaunchIndex int32            `xml:"amiLaunchIndex"`
	StateReason    *stateReasonXML  `xml:"stateReason,omitempty"`
	InstanceType   string           `xml:"instanceType"`
	LaunchTime     string           `xml:"launchTime"`
	Placement      placementXML     `xml:"placement"`
	Architecture   string           `xml:"architecture"`
	RootDeviceType string           `xml:"rootDeviceType"`
	RootDeviceName string           `xml:"rootDeviceName"`
	BlockDevices   []blockDeviceXML `xml:"blockDeviceMapping>item"`
	ClientToken    string           `xml:"clientToken,omitempty"`
	Tags           *tagSetXML       `xml:"tagSet,omitempty"`
}

type reservationXML struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	meta
	Reservations []reservationXML `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

func (h *Handler) describeInstances(p *params) (response, error) {
	in := p.describe("InstanceId")
	if p.err != nil {
		return nil, p.err
	}
	insts, next, err := h.state.DescribeInstances(in)
	if err != nil {
		return nil, err
	}
	out := &describeInstancesResponse{NextToken: next}
	// Instances of one launch share its reservation, as on EC2.
	at := map[string]int{}
	for _, inst := range insts {
		r := inst.ReservationID()
		i, ok := at[r]
		if !ok {
			i = len(out.Reservations)
			at[r] = i
			out.Reservations = append(out.Reservations, reservationXML{ReservationID: r, OwnerID: h.accountID})
		}
		out.Reservations[i].Instances = append(out.Reservations[i].Instances, h.instanceOf(inst))
	}
	return out, nil
}

// instanceOf is an instance as DescribeInstances and RunInstances show it.
func (h *Handler) instanceOf(inst state.InstanceView) instanceXML {
	x := instanceXML{InstanceID: inst.ID, ImageID: inst.ImageID(), State: instanceStateOf(inst.State), Reason: inst.TransitionReason,
		InstanceType: inst.InstanceType, LaunchTime: ec2Time(inst.LaunchTime), Architecture: inst.Architecture(),
		Placement:      placementXML{AvailabilityZone: inst.Zone, AvailabilityZoneID: h.zoneIDs[inst.Zone], Tenancy: state.Tenancy},
		RootDeviceType: state.RootDeviceType, RootDeviceName: state.RootDevice, Tags: tagsXML(inst.Tags)}
	if inst.Launch != nil {
		x.AmiLaunchIndex, x.ClientToken = inst.Launch.LaunchIndex, inst.Launch.ClientToken
	}
	for _, a := range inst.Attachments {
		x.BlockDevices = append(x.BlockDevices, blockDeviceXML{DeviceName: a.Device,
			Ebs: ebsXML{VolumeID: a.VolumeID, Status: a.State, AttachTime: ec2Time(a.AttachTime), DeleteOnTermination: a.DeleteOnTermination}})
	}
	if inst.StateReason != "" {
		x.StateReason = &stateReasonXML{Code: inst.StateReason, Message: state.StateReasonMessage(inst.StateReason)}
	}
	return x
}

type zoneXML struct {
	ZoneName           string `xml:"zoneName"`
	ZoneID             string `xml:"zoneId"`
	ZoneState          string `xml:"zoneState"`
	RegionName         string `xml:"regionName"`
	ZoneType           string `xml:"zoneType"`
	GroupName          string `xml:"groupName"`
	NetworkBorderGroup string `xml:"networkBorderGroup"`
	OptInStatus        string `xml:"optInStatus"`
}

type describeZonesResponse struct {
	meta
	Zones []zoneXML `xml:"availabilityZoneInfo>item"`
}

func (h *Handler) describeAvailabilityZones(p *params) (response, error) {
	in := state.ZoneFilter{Names: p.list("ZoneName"), IDs: p.list("ZoneId"), Filters: p.filters()}
	if p.err != nil {
		return nil, p.err
	}
	zones, err := h.state.DescribeAvailabilityZones(in)
	if err != nil {
		return nil, err
	}
	region := h.state.Region()
	out := &describeZonesResponse{Zones: make([]zoneXML, len(zones))}
	for i, z := range zones {
		out.Zones[i] = zoneXML{ZoneName: z.Name, ZoneID: z.ID, ZoneState: state.ZoneState, RegionName: region, ZoneType: state.ZoneType,
			GroupName: h.state.ZoneGroup(), NetworkBorderGroup: region, OptInStatus: state.ZoneOptInStatus}
	}
	return out, nil
}
