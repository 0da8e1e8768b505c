package topology

import (
	"strings"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// VolumeLimit is how many volumes the driver may attach to the node: its instance type's data volume limit (the
// table fakecloud enforces and DescribeInstanceTypes reports) less the volumes not the driver's it started with. A
// type missing from the table counts as instancetypes.Resolve says; known reports whether it was in the table.
func (id NodeIdentity) VolumeLimit() (limit int64, known bool) {
	typeLimit, known := TypeVolumeLimit(id.InstanceType)
	return LimitLess(typeLimit, id.BootVolumes), known
}

// TypeVolumeLimit is how many data volumes an instance of the type holds besides its root volume with its default
// network interface; a type missing from the table takes its family's most restrictive size, or the default
// type's limit (instancetypes.Resolve), and known says whether it was in the table.
func TypeVolumeLimit(instanceType string) (limit int64, known bool) {
	info, how := instancetypes.Resolve(instanceType)
	return int64(info.VolumeLimit()), how == instancetypes.FromTable
}

// LimitLess is the driver's volume limit when foreign volumes (attached by anything but the driver) take slots
// of typeLimit. It is at least 1: in CSI, 0 would mean no limit at all.
func LimitLess(typeLimit int64, foreign int) int64 {
	return max(typeLimit-int64(foreign), 1)
}

// ForeignVolumes counts the volumes attached to the instance that are not the driver's. attached is the device
// names the instance's metadata lists: on EC2 the volumes attached when the instance last started, not updated
// for volumes attached or detached since. ours is the device names the driver's attached volumes were published
// under ("" for one whose name is unknown). A name is the driver's when one of ours has it, or when it is one of
// the names the controller attaches under (DriverDevice): such an entry is a volume of the driver's, attached
// now (its VolumeAttachment counts it) or detached since the start (stale), and in neither case does it take a
// slot from the driver. Names compare as EC2 treats them: with or without /dev/, and sdX the same slot as xvdX.
func ForeignVolumes(attached, ours []string) int {
	mine := map[string]bool{}
	for _, d := range ours {
		mine[deviceKey(d)] = true
	}
	foreign := 0
	for _, d := range attached {
		if k := deviceKey(d); k != "" && !mine[k] && !DriverDevice(k) {
			foreign++
		}
	}
	return foreign
}

// DriverDevice reports whether name is one the controller attaches volumes under (cloud.DeviceNames), compared
// as EC2 treats names (deviceKey).
func DriverDevice(name string) bool {
	return cloud.IsDeviceName("/dev/" + deviceKey(name))
}

// deviceKey is a device name as EC2 identifies the slot: "/dev/sdf", "sdf" and "xvdf" are one.
func deviceKey(name string) string {
	name = strings.TrimPrefix(strings.TrimSpace(name), "/dev/")
	if rest, ok := strings.CutPrefix(name, "sd"); ok {
		name = "xvd" + rest
	}
	return name
}
