package api

import (
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

type ebsInfoXML struct {
	EbsOptimizedSupport   string `xml:"ebsOptimizedSupport"`
	EncryptionSupport     string `xml:"encryptionSupport"`
	NvmeSupport           string `xml:"nvmeSupport"`
	AttachmentLimitType   string `xml:"attachmentLimitType,omitempty"`
	MaximumEbsAttachments int32  `xml:"maximumEbsAttachments"`
}

type vcpuInfoXML struct {
	DefaultVCpus int32 `xml:"defaultVCpus"`
}

type memoryInfoXML struct {
	SizeInMiB int64 `xml:"sizeInMiB"`
}

type networkInfoXML struct {
	MaximumNetworkInterfaces int32 `xml:"maximumNetworkInterfaces"`
}

type processorInfoXML struct {
	SupportedArchitectures []string `xml:"supportedArchitectures>item"`
}

type instanceTypeXML struct {
	InstanceType      string         `xml:"instanceType"`
	CurrentGeneration bool           `xml:"currentGeneration"`
	Hypervisor        string         `xml:"hypervisor"`
	VCPUInfo          vcpuInfoXML    `xml:"vCpuInfo"`
	MemoryInfo        memoryInfoXML  `xml:"memoryInfo"`
	EbsInfo           ebsInfoXML     `xml:"ebsInfo"`
	NetworkInfo       networkInfoXML `xml:"networkInfo"`
	// ProcessorInfo is what RunInstances holds an image's architecture to.
	ProcessorInfo processorInfoXML `xml:"processorInfo"`
}

type describeInstanceTypesResponse struct {
	meta
	InstanceTypes []instanceTypeXML `xml:"instanceTypeSet>item"`
	NextToken     string            `xml:"nextToken,omitempty"`
}

func (h *Handler) describeInstanceTypes(p *params) (response, error) {
	in := p.describe("InstanceType")
	if p.err != nil {
		return nil, p.err
	}
	types, next, err := h.state.DescribeInstanceTypes(in)
	if err != nil {
		return nil, err
	}
	out := &describeInstanceTypesResponse{InstanceTypes: make([]instanceTypeXML, len(types)), NextToken: next}
	for i, t := range types {
		out.InstanceTypes[i] = instanceTypeXML{InstanceType: t.Name, CurrentGeneration: t.Hypervisor == instancetypes.HypervisorNitro,
			Hypervisor: t.Hypervisor, VCPUInfo: vcpuInfoXML{DefaultVCpus: t.VCPUs}, MemoryInfo: memoryInfoXML{SizeInMiB: t.MemoryMiB},
			EbsInfo: ebsInfoXML{EbsOptimizedSupport: "default", EncryptionSupport: "supported", NvmeSupport: t.NvmeSupport,
				AttachmentLimitType: t.AttachmentLimitType, MaximumEbsAttachments: t.MaximumEbsAttachments},
			NetworkInfo:   networkInfoXML{MaximumNetworkInterfaces: max(t.NetworkInterfaces, 3)},
			ProcessorInfo: processorInfoXML{SupportedArchitectures: []string{t.Architecture}}}
	}
	return out, nil
}
