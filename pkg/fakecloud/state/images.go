package state

import (
	"slices"
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// Image is an AMI of fakecloud's built-in catalog: one EBS-backed Linux image per architecture that RunInstances
// launches from. Its root device mapping is the root volume every instance launched from it gets, unless the
// request's mapping for RootDevice changes it. The images have no root snapshot (an instance has no compute,
// so no bytes to boot): the root volume starts empty.
type Image struct {
	ID           string
	Name         string
	Description  string
	Architecture string
	// OwnerID is Amazon's account that publishes Amazon Linux; OwnerAlias is "amazon".
	OwnerID    string
	OwnerAlias string
	// RootDevice, RootSizeGiB and RootType are the root volume's mapping.
	RootDevice   string
	RootSizeGiB  int32
	RootType     string
	CreationDate string
}

// What every catalog image is, as DescribeImages shows it and its filters select it.
const (
	ImageState              = "available"
	ImageType               = "machine"
	ImageVirtualizationType = "hvm"
	ImageHypervisor         = "xen"
	ImagePlatformDetails    = "Linux/UNIX"
)

// amazonOwnerID is the account Amazon publishes its Linux images from.
const amazonOwnerID = "137112412989"

// images is the catalog, fixed so that tests and scripts can name an image without looking it up.
var images = []Image{
	{ID: "ami-0fa4ec1000000a864", Name: "fakecloud-linux-x86_64", Description: "fakecloud Linux (x86_64), an empty root volume",
		Architecture: instancetypes.ArchX86_64, OwnerID: amazonOwnerID, OwnerAlias: "amazon",
		RootDevice: rootDevice, RootSizeGiB: 8, RootType: "gp3", CreationDate: "2024-01-01T00:00:00.000Z"},
	{ID: "ami-0fa4ec1000000a064", Name: "fakecloud-linux-arm64", Description: "fakecloud Linux (arm64), an empty root volume",
		Architecture: instancetypes.ArchArm64, OwnerID: amazonOwnerID, OwnerAlias: "amazon",
		RootDevice: rootDevice, RootSizeGiB: 8, RootType: "gp3", CreationDate: "2024-01-01T00:00:00.000Z"},
}

// Images is the catalog, for callers that name an image (tests, the docs' examples).
func Images() []Image { return slices.Clone(images) }

// imageByID finds a catalog image, with EC2's errors for a malformed or unknown ID.
func imageByID(id string) (Image, error) {
	if err := checkID("ami", ec2err.CodeInvalidAMIIDMalformed, id); err != nil {
		return Image{}, err
	}
	for _, im := range images {
		if im.ID == id {
			return im, nil
		}
	}
	return Image{}, ec2err.New(ec2err.CodeInvalidAMIIDNotFound, "The image id '[%s]' does not exist", id)
}

var imageFields = fields[Image]{
	"image-id":                         func(im *Image) []string { return []string{im.ID} },
	"name":                             func(im *Image) []string { return []string{im.Name} },
	"description":                      func(im *Image) []string { return []string{im.Description} },
	"architecture":                     func(im *Image) []string { return []string{im.Architecture} },
	"owner-id":                         func(im *Image) []string { return []string{im.OwnerID} },
	"owner-alias":                      func(im *Image) []string { return []string{im.OwnerAlias} },
	"state":                            func(*Image) []string { return []string{ImageState} },
	"is-public":                        func(*Image) []string { return []string{"true"} },
	"image-type":                       func(*Image) []string { return []string{ImageType} },
	"root-device-type":                 func(*Image) []string { return []string{RootDeviceType} },
	"root-device-name":                 func(im *Image) []string { return []string{im.RootDevice} },
	"virtualization-type":              func(*Image) []string { return []string{ImageVirtualizationType} },
	"hypervisor":                       func(*Image) []string { return []string{ImageHypervisor} },
	"platform-details":                 func(*Image) []string { return []string{ImagePlatformDetails} },
	"ena-support":                      func(*Image) []string { return []string{"true"} },
	"creation-date":                    func(im *Image) []string { return []string{im.CreationDate} },
	"block-device-mapping.device-name": func(im *Image) []string { return []string{im.RootDevice} },
	"block-device-mapping.volume-size": func(im *Image) []string {
		return []string{strconv.Itoa(int(im.RootSizeGiB))}
	},
	"block-device-mapping.volume-type":           func(im *Image) []string { return []string{im.RootType} },
	"block-device-mapping.delete-on-termination": func(*Image) []string { return []string{"true"} },
	"block-device-mapping.encrypted":             func(*Image) []string { return []string{"false"} },
	// What none of the catalog's images has: a root snapshot, a kernel or ramdisk of its own (HVM), a source
	// (none is a copy), product codes, a platform (none is Windows) or a failed state.
	"block-device-mapping.snapshot-id": noValues[Image],
	"kernel-id":                        noValues[Image],
	"ramdisk-id":                       noValues[Image],
	"source-image-id":                  noValues[Image],
	"source-image-region":              noValues[Image],
	"source-instance-id":               noValues[Image],
	"product-code":                     noValues[Image],
	"product-code.type":                noValues[Image],
	"platform":                         noValues[Image],
	"state-reason-code":                noValues[Image],
	"state-reason-message":             noValues[Image],
}

// DescribeImagesInput is DescribeImages' request: image IDs, owners (account IDs, or amazon or self) and filters.
type DescribeImagesInput struct {
	IDs     []string
	Owners  []string
	Filters []Filter
}

// DescribeImages lists the catalog's images. Every image is public and Amazon's, so Owner self (this account's
// images) selects none. Named IDs must all exist, as EC2 asks.
func (s *State) DescribeImages(in DescribeImagesInput) ([]Image, error) {
	match, err := imageFields.compile(in.Filters, func(*Image) []Tag { return nil })
	if err != nil {
		return nil, err
	}
	for _, id := range in.IDs {
		if _, err := imageByID(id); err != nil {
			return nil, err
		}
	}
	var out []Image
	for _, im := range images {
		if len(in.IDs) > 0 && !slices.Contains(in.IDs, im.ID) {
			continue
		}
		if len(in.Owners) > 0 && !slices.Contains(in.Owners, im.OwnerID) && !slices.Contains(in.Owners, im.OwnerAlias) {
			continue
		}
		if match(&im) {
			out = append(out, im)
		}
	}
	return out, nil
}
