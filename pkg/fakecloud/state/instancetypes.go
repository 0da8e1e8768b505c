package state

import (
	"strconv"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// checkInstanceType refuses types fakecloud has no limits for; empty is the default type.
func checkInstanceType(name string) error {
	if _, ok := instancetypes.Lookup(name); ok || name == "" {
		return nil
	}
	return ec2err.New(ec2err.CodeInvalidInstanceType, "The following supplied instance types do not exist: [%s]", name)
}

// maxNetworkInterfaces bounds an instance's network interfaces: more than any instance type takes.
const maxNetworkInterfaces = 64

// checkInterfaces refuses a network interface count no instance has.
func checkInterfaces(n int) error {
	if n < 0 || n > maxNetworkInterfaces {
		return ec2err.New(ec2err.CodeInvalidParameterValue, "Value (%d) for parameter networkInterfaces is invalid. It must be between 0 and %d.", n, maxNetworkInterfaces)
	}
	return nil
}

var instanceTypeFields = fields[instancetypes.Info]{
	"instance-type":                  func(i *instancetypes.Info) []string { return []string{i.Name} },
	"hypervisor":                     func(i *instancetypes.Info) []string { return []string{i.Hypervisor} },
	"ebs-info.nvme-support":          func(i *instancetypes.Info) []string { return []string{i.NvmeSupport} },
	"ebs-info.attachment-limit-type": func(i *instancetypes.Info) []string { return []string{i.AttachmentLimitType} },
	"ebs-info.maximum-ebs-attachments": func(i *instancetypes.Info) []string {
		return []string{strconv.Itoa(int(i.MaximumEbsAttachments))}
	},
	"processor-info.supported-architecture": func(i *instancetypes.Info) []string { return []string{i.Architecture} },
	"vcpu-info.default-vcpus":               func(i *instancetypes.Info) []string { return []string{strconv.Itoa(int(i.VCPUs))} },
}

// DescribeInstanceTypes lists the instance types fakecloud knows, with the EBS limits it enforces on instances
// of each type.
func (s *State) DescribeInstanceTypes(in DescribeInput) ([]instancetypes.Info, string, error) {
	match, err := instanceTypeFields.compile(in.Filters, func(*instancetypes.Info) []Tag { return nil })
	if err != nil {
		return nil, "", err
	}
	index := idIndex{ids: instancetypes.Names()}
	if len(in.IDs) > 0 {
		index = idIndex{}
		for _, n := range in.IDs {
			if _, ok := instancetypes.Lookup(n); !ok {
				return nil, "", ec2err.New(ec2err.CodeInvalidInstanceType, "The following supplied instance types do not exist: [%s]", n)
			}
			index.insert(n)
		}
	}
	names, next, err := typePages.page(&index, in.Page, false, func(n string) bool {
		info, _ := instancetypes.Lookup(n)
		return match(&info)
	})
	if err != nil {
		return nil, "", err
	}
	out := make([]instancetypes.Info, 0, len(names))
	for _, n := range names {
		info, _ := instancetypes.Lookup(n)
		out = append(out, info)
	}
	return out, next, nil
}
