package api

import (
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type copySnapshotResponse struct {
	meta
	SnapshotID string     `xml:"snapshotId"`
	Tags       *tagSetXML `xml:"tagSet,omitempty"`
}

// copySnapshot is EC2's CopySnapshot within the served region. PresignedUrl (which the SDKs add for a copy
// across regions) is not needed within one and is ignored.
func (h *Handler) copySnapshot(p *params) (response, error) {
	in := state.CopySnapshotInput{
		SourceSnapshotID: p.required("SourceSnapshotId"), SourceRegion: p.required("SourceRegion"),
		Description: p.str("Description"), Encrypted: p.boolean("Encrypted"), KmsKeyID: p.str("KmsKeyId"),
		Tags: p.tagSpecs("snapshot"), DryRun: p.boolean("DryRun"),
	}
	if dst := p.str("DestinationRegion"); p.err == nil && dst != "" && dst != h.state.Region() {
		p.fail(ec2err.InvalidValue("DestinationRegion", dst, "A snapshot is copied to the region the request is sent to, "+h.state.Region()+"."))
	}
	if p.err == nil && (p.str("DestinationOutpostArn") != "" || p.str("DestinationAvailabilityZone") != "") {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "fakecloud has no Outposts or Local Zones to copy a snapshot to."))
	}
	if p.err != nil {
		return nil, p.err
	}
	sn, err := h.state.CopySnapshot(in)
	if err != nil {
		return nil, err
	}
	return &copySnapshotResponse{SnapshotID: sn.ID, Tags: tagsXML(sn.Tags)}, nil
}

type snapshotInfoXML struct {
	SnapshotID  string     `xml:"snapshotId"`
	VolumeID    string     `xml:"volumeId"`
	State       string     `xml:"state"`
	StartTime   string     `xml:"startTime"`
	Progress    string     `xml:"progress"`
	OwnerID     string     `xml:"ownerId"`
	VolumeSize  int32      `xml:"volumeSize"`
	Description string     `xml:"description"`
	Encrypted   bool       `xml:"encrypted"`
	Tags        *tagSetXML `xml:"tagSet,omitempty"`
}

type createSnapshotsResponse struct {
	meta
	Snapshots []snapshotInfoXML `xml:"snapshotSet>item"`
}

// createSnapshots is EC2's CreateSnapshots: crash-consistent snapshots of an instance's volumes.
func (h *Handler) createSnapshots(p *params) (response, error) {
	in := state.CreateSnapshotsInput{
		InstanceID:        p.required("InstanceSpecification.InstanceId"),
		ExcludeBootVolume: p.boolean("InstanceSpecification.ExcludeBootVolume"),
		ExcludeVolumeIDs:  p.list("InstanceSpecification.ExcludeDataVolumeId"),
		Description:       p.str("Description"), Tags: p.tagSpecs("snapshot"), DryRun: p.boolean("DryRun"),
	}
	switch c := p.str("CopyTagsFromSource"); {
	case p.err != nil:
	case c == "volume":
		in.CopyVolumeTags = true
	case p.has("CopyTagsFromSource"):
		p.fail(ec2err.InvalidValue("CopyTagsFromSource", c, "Expecting 'volume'."))
	}
	if l := p.str("Location"); p.err == nil && l != "" && l != "regional" {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "fakecloud has no Outposts or Local Zones to keep local snapshots on."))
	}
	if p.err == nil && p.str("OutpostArn") != "" {
		p.fail(ec2err.New(ec2err.CodeUnsupportedOperation, "fakecloud has no Outposts to keep snapshots on."))
	}
	if p.err != nil {
		return nil, p.err
	}
	sns, err := h.state.CreateSnapshots(in)
	if err != nil {
		return nil, err
	}
	out := &createSnapshotsResponse{Snapshots: make([]snapshotInfoXML, len(sns))}
	for i, sn := range sns {
		out.Snapshots[i] = snapshotInfoXML{SnapshotID: sn.ID, VolumeID: sn.VolumeID, State: sn.State, StartTime: ec2Time(sn.StartTime),
			Progress: strconv.Itoa(sn.Progress) + "%", OwnerID: sn.OwnerID, VolumeSize: sn.VolumeSize, Description: sn.Description,
			Encrypted: sn.Encrypted, Tags: tagsXML(sn.Tags)}
	}
	return out, nil
}
