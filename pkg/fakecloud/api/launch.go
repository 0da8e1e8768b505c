package api

import (
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// runInstancesResponse is EC2's Reservation at the top of the reply.
type runInstancesResponse struct {
	meta
	reservationXML
}

// runInstances reads what an instance with no compute needs: image, type, count, zone, block devices, tags and
// ClientToken. Networking, keys, user data and the like mean nothing here and are not read.
func (h *Handler) runInstances(p *params) (response, error) {
	tags := p.tagSpecsOf("instance", "volume")
	in := state.RunInstancesInput{
		ImageID: p.required("ImageId"), InstanceType: p.str("InstanceType"),
		Zone: p.str("Placement.AvailabilityZone"), ZoneID: p.str("Placement.AvailabilityZoneId"), SubnetID: p.str("SubnetId"),
		Devices: p.launchDevices(), InstanceTags: tags["instance"], VolumeTags: tags["volume"],
		ClientToken: p.str("ClientToken"), DryRun: p.boolean("DryRun"),
	}
	minCount, maxCount := p.int32p("MinCount"), p.int32p("MaxCount")
	switch {
	case p.err != nil:
	case maxCount == nil:
		p.fail(ec2err.Missing("MaxCount"))
	case minCount == nil:
		p.fail(ec2err.Missing("MinCount"))
	default:
		in.MinCount, in.MaxCount = *minCount, *maxCount
	}
	if p.err != nil {
		return nil, p.err
	}
	r, err := h.state.RunInstances(in)
	if err != nil {
		return nil, err
	}
	out := &runInstancesResponse{reservationXML: reservationXML{ReservationID: r.ID, OwnerID: h.accountID}}
	for _, inst := range r.Instances {
		out.Instances = append(out.Instances, h.instanceOf(inst))
	}
	return out, nil
}

// ebsMembers are the EbsBlockDevice members a launch's volume takes.
var ebsMembers = []string{"Ebs.VolumeSize", "Ebs.VolumeType", "Ebs.Iops", "Ebs.Throughput", "Ebs.Encrypted", "Ebs.KmsKeyId",
	"Ebs.SnapshotId", "Ebs.DeleteOnTermination"}

// launchDevices reads BlockDeviceMapping.N. VirtualName (an instance store volume) is refused: fakecloud
// instances have none.
func (p *params) launchDevices() []state.LaunchDevice {
	var out []state.LaunchDevice
	for _, i := range p.indexes("BlockDeviceMapping", append([]string{"DeviceName", "NoDevice", "VirtualName"}, ebsMembers...)...) {
		base := "BlockDeviceMapping." + strconv.Itoa(i)
		if p.has(base + ".VirtualName") {
			p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "fakecloud instances have no instance store volumes (%s.VirtualName).", base))
			return nil
		}
		d := state.LaunchDevice{Device: p.required(base + ".DeviceName"), NoDevice: p.has(base + ".NoDevice")}
		e := base + ".Ebs."
		ebs := &state.CreateVolumeInput{SizeGiB: p.int32p(e + "VolumeSize"), VolumeType: p.str(e + "VolumeType"), Iops: p.int32p(e + "Iops"),
			Throughput: p.int32p(e + "Throughput"), Encrypted: p.boolean(e + "Encrypted"), KmsKeyID: p.str(e + "KmsKeyId"),
			SnapshotID: p.str(e + "SnapshotId")}
		d.DeleteOnTermination = p.boolp(e + "DeleteOnTermination")
		for _, m := range ebsMembers {
			if p.has(base + "." + m) {
				d.Ebs = ebs
			}
		}
		out = append(out, d)
	}
	return out
}
