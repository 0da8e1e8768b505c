package api

import "github.com/diskforge/diskforge/pkg/fakecloud/state"

type attributeBooleanXML struct {
	Value bool `xml:"value"`
}

type describeVolumeAttributeResponse struct {
	meta
	VolumeID     string               `xml:"volumeId"`
	AutoEnableIO *attributeBooleanXML `xml:"autoEnableIO,omitempty"`
	// ProductCodes is always empty: fakecloud has no Marketplace.
	ProductCodes *struct{} `xml:"productCodes,omitempty"`
}

// describeVolumeAttribute answers the one attribute asked, as EC2 does.
func (h *Handler) describeVolumeAttribute(p *params) (response, error) {
	id, attr := p.required("VolumeId"), p.required("Attribute")
	if p.err != nil {
		return nil, p.err
	}
	auto, err := h.state.DescribeVolumeAttribute(id, attr)
	if err != nil {
		return nil, err
	}
	out := &describeVolumeAttributeResponse{VolumeID: id}
	if attr == state.AttrAutoEnableIO {
		out.AutoEnableIO = &attributeBooleanXML{Value: auto}
	} else {
		out.ProductCodes = &struct{}{}
	}
	return out, nil
}

// modifyVolumeAttribute's reply has no members but the request ID.
func (h *Handler) modifyVolumeAttribute(p *params) (response, error) {
	id, auto, dry := p.required("VolumeId"), p.boolp("AutoEnableIO.Value"), p.boolean("DryRun")
	if p.err != nil {
		return nil, p.err
	}
	if err := h.state.ModifyVolumeAttribute(id, auto, dry); err != nil {
		return nil, err
	}
	return &meta{}, nil
}
