package api

import (
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

type imageEbsXML struct {
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
	VolumeSize          int32  `xml:"volumeSize"`
	VolumeType          string `xml:"volumeType"`
	Encrypted           bool   `xml:"encrypted"`
}

type imageBlockDeviceXML struct {
	DeviceName string      `xml:"deviceName"`
	Ebs        imageEbsXML `xml:"ebs"`
}

type imageXML struct {
	ImageID            string                `xml:"imageId"`
	ImageLocation      string                `xml:"imageLocation"`
	ImageState         string                `xml:"imageState"`
	ImageOwnerID       string                `xml:"imageOwnerId"`
	CreationDate       string                `xml:"creationDate"`
	IsPublic           bool                  `xml:"isPublic"`
	Architecture       string                `xml:"architecture"`
	ImageType          string                `xml:"imageType"`
	ImageOwnerAlias    string                `xml:"imageOwnerAlias"`
	Name               string                `xml:"name"`
	Description        string                `xml:"description"`
	RootDeviceType     string                `xml:"rootDeviceType"`
	RootDeviceName     string                `xml:"rootDeviceName"`
	BlockDeviceMapping []imageBlockDeviceXML `xml:"blockDeviceMapping>item"`
	VirtualizationType string                `xml:"virtualizationType"`
	Hypervisor         string                `xml:"hypervisor"`
	EnaSupport         bool                  `xml:"enaSupport"`
	PlatformDetails    string                `xml:"platformDetails"`
	UsageOperation     string                `xml:"usageOperation"`
}

type describeImagesResponse struct {
	meta
	Images []imageXML `xml:"imagesSet>item"`
}

// describeImages lists fakecloud's built-in images. ExecutableBy is read and ignored: every image is public.
func (h *Handler) describeImages(p *params) (response, error) {
	in := state.DescribeImagesInput{IDs: p.list("ImageId"), Owners: p.list("Owner"), Filters: p.filters()}
	p.list("ExecutableBy")
	p.boolean("IncludeDeprecated")
	p.boolean("IncludeDisabled")
	if p.err != nil {
		return nil, p.err
	}
	images, err := h.state.DescribeImages(in)
	if err != nil {
		return nil, err
	}
	out := &describeImagesResponse{Images: make([]imageXML, len(images))}
	for i, im := range images {
		out.Images[i] = imageXML{ImageID: im.ID, ImageLocation: "amazon/" + im.Name, ImageState: state.ImageState, ImageOwnerID: im.OwnerID,
			CreationDate: im.CreationDate, IsPublic: true, Architecture: im.Architecture, ImageType: state.ImageType, ImageOwnerAlias: im.OwnerAlias,
			Name: im.Name, Description: im.Description, RootDeviceType: state.RootDeviceType, RootDeviceName: im.RootDevice,
			BlockDeviceMapping: []imageBlockDeviceXML{{DeviceName: im.RootDevice,
				Ebs: imageEbsXML{DeleteOnTermination: true, VolumeSize: im.RootSizeGiB, VolumeType: im.RootType}}},
			VirtualizationType: state.ImageVirtualizationType, Hypervisor: state.ImageHypervisor, EnaSupport: true,
			PlatformDetails: state.ImagePlatformDetails, UsageOperation: "RunInstances"}
	}
	return out, nil
}
