// Package instancetypes is the table of EC2 instance types the project knows: how many EBS volumes each can
// hold and how it exposes them. fakecloud enforces and reports these limits (DescribeInstanceTypes), and the
// node plugin computes the volume limit it reports from the same table, so both agree. The table is
// types.tsv, embedded; its header names the sources. It depends on nothing else in the project.
package instancetypes

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// LimitShared: EBS volumes, network interfaces and NVMe instance store share the type's slots.
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
	// MaximumEbsAttachments is EC2's EbsInfo.MaximumEbsAttachments: the EBS volumes an instance of the type
	// holds, its root volume's included. On a shared limit EC2 reports it with the primary network interface
	// and the NVMe instance store volumes already taken out.
	MaximumEbsAttachments int32
	// InstanceStoreVolumes is how many NVMe instance store volumes the type has; on a shared limit each takes
	// one of the slots (MaximumEbsAttachments is what is left).
	InstanceStoreVolumes int32
	// NetworkInterfaces is how many network interfaces an instance of the type has by default.
	NetworkInterfaces int32
}

// VolumeLimit is how many data volumes an instance of the type holds besides its root volume with its
// default network interfaces.
func (i Info) VolumeLimit() int {
	return i.VolumeLimitWith(int(i.NetworkInterfaces))
}

// VolumeLimitWith is how many data volumes an instance of the type holds besides its root volume when it has
// interfaces network interfaces attached: on a shared limit each interface past the primary one (which
// MaximumEbsAttachments already leaves out) takes a slot; on a dedicated limit and on Xen they take none.
func (i Info) VolumeLimitWith(interfaces int) int {
	n := int(i.MaximumEbsAttachments) - 1
	if i.AttachmentLimitType == LimitShared {
		n -= max(interfaces-1, 0)
	}
	return max(n, 0)
}

// Default is the type of instances that name none.
const Default = "m5.large"

// LaunchDefault is the type EC2's RunInstances launches when the request names none.
const LaunchDefault = "m1.small"

//go:embed types.tsv
var typesTSV string

// table is the known types by name, built once from types.tsv; read it through Lookup, Names and Resolve.
var table = mustParse(typesTSV)

// Lookup returns the type's row.
func Lookup(name string) (Info, bool) {
	i, ok := table.byName[name]
	return i, ok
}

// Names lists the known types in name order.
func Names() []string {
	return slices.Clip(slices.Clone(table.names))
}

type rows struct {
	byName map[string]Info
	names  []string // sorted
}

func mustParse(text string) rows {
	r, err := parse(text)
	if err != nil {
		panic(fmt.Sprintf("instancetypes: types.tsv: %v", err))
	}
	return r
}

// parse reads the table: "#" lines are comments, the first other line names the columns.
func parse(text string) (rows, error) {
	r := rows{byName: map[string]Info{}}
	header := true
	for n, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if header {
			header = false
			continue
		}
		info, err := parseRow(strings.Split(line, "\t"))
		if err != nil {
			return rows{}, fmt.Errorf("line %d: %w", n+1, err)
		}
		if _, dup := r.byName[info.Name]; dup {
			return rows{}, fmt.Errorf("line %d: %s listed twice", n+1, info.Name)
		}
		r.byName[info.Name] = info
		r.names = append(r.names, info.Name)
	}
	slices.Sort(r.names)
	return r, nil
}

func parseRow(f []string) (Info, error) {
	if len(f) != 9 {
		return Info{}, fmt.Errorf("%d columns, want 9", len(f))
	}
	var nums [4]int64
	for i, col := range []int{3, 4, 7, 8} {
		v, err := strconv.ParseInt(f[col], 10, 64)
		if err != nil || v < 0 {
			return Info{}, fmt.Errorf("%s: column %d: not a count: %q", f[0], col+1, f[col])
		}
		nums[i] = v
	}
	info := Info{Name: f[0], Hypervisor: f[1], Architecture: f[2], VCPUs: int32(nums[0]), MemoryMiB: nums[1],
		NvmeSupport: f[5], AttachmentLimitType: strings.TrimPrefix(f[6], "-"),
		MaximumEbsAttachments: int32(nums[2]), InstanceStoreVolumes: int32(nums[3]), NetworkInterfaces: 1}
	family, _, ok := strings.Cut(info.Name, ".")
	switch {
	case !ok || family == "":
		return Info{}, fmt.Errorf("%q: not family.size", info.Name)
	case info.Hypervisor != HypervisorNitro && info.Hypervisor != HypervisorXen:
		return Info{}, fmt.Errorf("%s: hypervisor %q", info.Name, info.Hypervisor)
	case info.Architecture != ArchX86_64 && info.Architecture != ArchArm64:
		return Info{}, fmt.Errorf("%s: architecture %q", info.Name, info.Architecture)
	case info.NvmeSupport != NvmeRequired && info.NvmeSupport != NvmeSupported && info.NvmeSupport != NvmeUnsupported:
		return Info{}, fmt.Errorf("%s: nvme %q", info.Name, info.NvmeSupport)
	case (info.Hypervisor == HypervisorXen) != (info.AttachmentLimitType == ""):
		return Info{}, fmt.Errorf("%s: limit %q on %s", info.Name, f[6], info.Hypervisor)
	case info.AttachmentLimitType != "" && info.AttachmentLimitType != LimitShared && info.AttachmentLimitType != LimitDedicated:
		return Info{}, fmt.Errorf("%s: limit %q", info.Name, f[6])
	case info.MaximumEbsAttachments < 2:
		return Info{}, fmt.Errorf("%s: %d attachments leave no data volume", info.Name, info.MaximumEbsAttachments)
	}
	return info, nil
}
