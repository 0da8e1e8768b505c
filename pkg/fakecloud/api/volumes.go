package api

import (
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type createVolumeResponse struct {
	meta
	volumeXML
}

func (h *Handler) createVolume(p *params) (response, error) {
	in := state.CreateVolumeInput{
		SizeGiB: p.int32p("Size"), VolumeType: p.str("VolumeType"), Iops: p.int32p("Iops"), Throughput: p.int32p("Throughput"),
		Encrypted: p.boolean("Encrypted"), KmsKeyID: p.str("KmsKeyId"), SnapshotID: p.str("SnapshotId"),
		Zone: p.str("AvailabilityZone"), ZoneID: p.str("AvailabilityZoneId"), MultiAttach: p.boolean("MultiAttachEnabled"),
		Tags: p.tagSpecs("volume"), ClientToken: p.str("ClientToken"), DryRun: p.boolean("DryRun"),
		InitRate: p.int32p("VolumeInitializationRate"),
	}
	if p.err != nil {
		return nil, p.err
	}
	v, err := h.state.CreateVolume(in)
	if err != nil {
		return nil, err
	}
	x := h.volumeOf(v)
	// EC2 documents fastRestored as not returned by CreateVolume.
	x.FastRestored = nil
	return &createVolumeResponse{volumeXML: x}, nil
}

type copyVolumesResponse struct {
	meta
	Volumes []volumeXML `xml:"volumeSet>item"`
}

// copyVolumes is EC2's CopyVolumes: one new volume with the source's bytes, in the source's zone. A copy takes
// the source's encryption and key; EC2's CopyVolumes has no Encrypted or KmsKeyId to ask otherwise.
func (h *Handler) copyVolumes(p *params) (response, error) {
	in := state.CreateVolumeInput{
		SourceVolumeID: p.required("SourceVolumeId"), SizeGiB: p.int32p("Size"), VolumeType: p.str("VolumeType"),
		Iops: p.int32p("Iops"), Throughput: p.int32p("Throughput"), MultiAttach: p.boolean("MultiAttachEnabled"),
		Tags: p.tagSpecs("volume"), ClientToken: p.str("ClientToken"), DryRun: p.boolean("DryRun"),
	}
	if p.err != nil {
		return nil, p.err
	}
	v, err := h.state.CreateVolume(in)
	if err != nil {
		return nil, err
	}
	return &copyVolumesResponse{Volumes: []volumeXML{h.volumeOf(v)}}, nil
}

type returnResponse struct {
	meta
	Return bool `xml:"return"`
}

func (h *Handler) deleteVolume(p *params) (response, error) {
	id, dry := p.required("VolumeId"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.DeleteVolume(id, dry); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

type describeVolumesResponse struct {
	meta
	Volumes   []volumeXML `xml:"volumeSet>item"`
	NextToken string      `xml:"nextToken,omitempty"`
}

func (h *Handler) describeVolumes(p *params) (response, error) {
	in := p.describe("VolumeId")
	if p.err != nil {
		return nil, p.err
	}
	vols, next, err := h.state.DescribeVolumes(in)
	if err != nil {
		return nil, err
	}
	out := &describeVolumesResponse{Volumes: make([]volumeXML, len(vols)), NextToken: next}
	for i, v := range vols {
		out.Volumes[i] = h.volumeOf(v)
	}
	return out, nil
}

type attachmentResponse struct {
	meta
	attachmentXML
}

func (h *Handler) attachVolume(p *params) (response, error) {
	in := state.AttachInput{VolumeID: p.required("VolumeId"), InstanceID: p.required("InstanceId"), Device: p.required("Device"), DryRun: p.boolean("DryRun")}
	if p.err != nil {
		return nil, p.err
	}
	a, err := h.state.AttachVolume(in)
	if err != nil {
		return nil, err
	}
	return &attachmentResponse{attachmentXML: attachmentOf(a)}, nil
}

func (h *Handler) detachVolume(p *params) (response, error) {
	in := state.DetachInput{VolumeID: p.required("VolumeId"), InstanceID: p.str("InstanceId"), Device: p.str("Device"),
		Force: p.boolean("Force"), DryRun: p.boolean("DryRun")}
	if p.err != nil {
		return nil, p.err
	}
	a, err := h.state.DetachVolume(in)
	if err != nil {
		return nil, err
	}
	return &attachmentResponse{attachmentXML: attachmentOf(a)}, nil
}

type modifyVolumeResponse struct {
	meta
	Modification modificationXML `xml:"volumeModification"`
}

func (h *Handler) modifyVolume(p *params) (response, error) {
	in := state.ModifyInput{VolumeID: p.required("VolumeId"), SizeGiB: p.int32p("Size"), VolumeType: p.str("VolumeType"),
		Iops: p.int32p("Iops"), Throughput: p.int32p("Throughput"), MultiAttach: p.boolp("MultiAttachEnabled"), DryRun: p.boolean("DryRun")}
	if p.err != nil {
		return nil, p.err
	}
	m, err := h.state.ModifyVolume(in)
	if err != nil {
		return nil, err
	}
	return &modifyVolumeResponse{Modification: modificationOf(m)}, nil
}

type describeModificationsResponse struct {
	meta
	Modifications []modificationXML `xml:"volumeModificationSet>item"`
	NextToken     string            `xml:"nextToken,omitempty"`
}

func (h *Handler) describeVolumesModifications(p *params) (response, error) {
	in := p.describe("VolumeId")
	if p.err != nil {
		return nil, p.err
	}
	mods, next, err := h.state.DescribeVolumesModifications(in)
	if err != nil {
		return nil, err
	}
	out := &describeModificationsResponse{Modifications: make([]modificationXML, len(mods)), NextToken: next}
	for i, m := range mods {
		out.Modifications[i] = modificationOf(m)
	}
	return out, nil
}
