// Package instancetypes is the table of EC2 instance types the project knows: how many EBS volumes each can
// hold and how it exposes them. fakecloud enforces and reports these limits (DescribeInstanceTypes), and the
// node plugin can compute the volume limit it reports from the same table, so both agree. It depends on
// nothing else in the project.
package instancetypes

import (
	"slices"
	"sort"
)

// Hypervisors.
const (
	HypervisorNitro = "nitro"
	HypervisorXen   = "xen"
)

// NVMe support of EBS volumes, spelled as EC2's EbsInfo.NvmeSupport.
const (
	NvmeRequired    = "required"
	NvmeSupported   = "supported"
	NvmeUnsupported = "unsupported"
)

// Attachment limit types, spelled as EC2's EbsInfo.AttachmentLimitType.
const (
	// LimitShared: EBS volumes, network interfaces and NVMe instance store share MaximumEbsAttachments slots.
	LimitShared = "shared"
	// LimitDedicated: MaximumEbsAttachments counts EBS volumes only.
	LimitDedicated = "dedicated"
)

// Processor architectures, spelled as EC2's ProcessorInfo.SupportedArchitectures and an image's architecture.
const (
	ArchX86_64 = "x86_64"
	ArchArm64  = "arm64"
)

// Info is one instance type.
type Info struct {
	Name       string
	Hypervisor string
	// Architecture is the one processor architecture the type runs; an image must match it.
	Architecture string
	VCPUs        int32
	MemoryMiB    int64
	NvmeSupport  string
	// AttachmentLimitType is LimitShared or LimitDedicated on Nitro, empty on Xen (whose limit is a
	// recommendation for EBS volumes alone).
	AttachmentLimitType string
	// MaximumEbsAttachments is EC2's EbsInfo.MaximumEbsAttachments: the attachment slots of the type, the root
	// volume's included.
	MaximumEbsAttachments int32
	// NetworkInterfaces is how many network interfaces an instance of the type has by default; on a shared
	// limit each takes a slot.
	NetworkInterfaces int32
}

// VolumeLimit is how many data volumes an instance of the type can hold besides its root volume: the slots
// less the root volume and, where slots are shared, the default network interfaces.
func (i Info) VolumeLimit() int {
	n := i.MaximumEbsAttachments - 1
	if i.AttachmentLimitType == LimitShared {
		n -= i.NetworkInterfaces
	}
	return int(max(n, 0))
}

// Default is the type of instances that name none.
const Default = "m5.large"

// LaunchDefault is the type EC2's RunInstances launches when the request names none.
const LaunchDefault = "m1.small"

// nitro and xen build the table's rows. Nitro types share 28 slots (the EC2 User Guide's "Amazon EBS volume
// limits"); Xen types have a recommended limit of 40 EBS volumes and no NVMe.
func nitro(name string, vcpus int32, memMiB int64) Info {
	return Info{Name: name, Hypervisor: HypervisorNitro, Architecture: ArchX86_64, VCPUs: vcpus, MemoryMiB: memMiB, NvmeSupport: NvmeRequired,
		AttachmentLimitType: LimitShared, MaximumEbsAttachments: 28, NetworkInterfaces: 1}
}

// graviton is a Nitro type on an AWS Graviton (arm64) processor.
func graviton(name string, vcpus int32, memMiB int64) Info {
	i := nitro(name, vcpus, memMiB)
	i.Architecture = ArchArm64
	return i
}

func xen(name string, vcpus int32, memMiB int64) Info {
	return Info{Name: name, Hypervisor: HypervisorXen, Architecture: ArchX86_64, VCPUs: vcpus, MemoryMiB: memMiB, NvmeSupport: NvmeUnsupported,
		MaximumEbsAttachments: 40, NetworkInterfaces: 1}
}

// table is the known types by name; read it through Lookup and Names.
var table = func() map[string]Info {
	rows := []Info{
		nitro("m5.large", 2, 8192), nitro("m5.xlarge", 4, 16384), nitro("m5.2xlarge", 8, 32768),
		nitro("c5.large", 2, 4096), nitro("c5.xlarge", 4, 8192), nitro("r5.large", 2, 16384),
		nitro("t3.medium", 2, 4096), nitro("t3.large", 2, 8192),
		xen("m4.large", 2, 8192), xen("m4.xlarge", 4, 16384), xen("t2.medium", 2, 4096), xen("c4.large", 2, 3840),
		xen("m1.small", 1, 1740),
		graviton("m6g.large", 2, 8192), graviton("c6g.large", 2, 4096), graviton("t4g.medium", 2, 4096),
	}
	m := make(map[string]Info, len(rows))
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}()

// Lookup returns the type's row.
func Lookup(name string) (Info, bool) {
	i, ok := table[name]
	return i, ok
}

// Names lists the known types in name order.
func Names() []string {
	out := make([]string, 0, len(table))
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
