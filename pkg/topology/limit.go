package topology

import "github.com/diskforge/diskforge/pkg/instancetypes"

// VolumeLimit is how many volumes the driver may attach to the node: its instance type's data volume limit (the
// table fakecloud enforces and DescribeInstanceTypes reports) less the volumes it booted with. An unknown or
// unnamed type counts as instancetypes.Default; known reports which happened.
func (id NodeIdentity) VolumeLimit() (limit int64, known bool) {
	info, known := instancetypes.Lookup(id.InstanceType)
	if !known {
		info, _ = instancetypes.Lookup(instancetypes.Default)
	}
	return max(int64(info.VolumeLimit()-id.BootVolumes), 1), known
}
