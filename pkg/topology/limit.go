package topology

import (
	"strings"

	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// VolumeLimit is how many volumes the driver may attach to the node: its instance type's data volume limit (the
// table fakecloud enforces and DescribeInstanceTypes reports) less the volumes it booted with. An unknown or
// unnamed type counts as instancetypes.Default; known reports which happened.
func (id NodeIdentity) VolumeLimit() (limit int64, known bool) {
	typeLimit, known := TypeVolumeLimit(id.InstanceType)
	return LimitLess(typeLimit, id.BootVolumes), known
}

// TypeVolumeLimit is how many data volumes an instance of the type holds besides its root volume; an unknown
// or empty type counts as instancetypes.Default, and known says which happened.
func TypeVolumeLimit(instanceType string) (limit int64, known bool) {
	info, known := instancetypes.Lookup(instanceType)
	if !known {
		info, _ = instancetypes.Lookup(instancetypes.Default)
	}
	return int64(info.VolumeLimit()), known
}

// LimitLess is the driver's volume limit when foreign volumes (attached by anything but the driver) take slots
// of typeLimit. It is at least 1: in CSI, 0 would mean no limit at all.
func LimitLess(typeLimit int64, foreign int) int64 {
	return max(typeLimit-int64(foreign), 1)
}

// ForeignVolumes counts the volumes attached to the instance that are not the driver's. attached is the device
// names the instance's metadata lists; ours is the device names the driver's attached volumes were published
// under, "" for one whose name is unknown. Names compare as EC2 treats them: with or without /dev/, and sdX
// the same slot as xvdX. A volume of ours missing from attached (EC2 lists only the volumes of the instance's
// start) takes nothing away; one of unknown name takes one of the names that are not ours.
func ForeignVolumes(attached, ours []string) int {
	mine := map[string]bool{}
	unknown := 0
	for _, d := range ours {
		if k := deviceKey(d); k != "" {
			mine[k] = true
		} else {
			unknown++
		}
	}
	foreign := 0
	for _, d := range attached {
		if k := deviceKey(d); k != "" && !mine[k] {
			foreign++
		}
	}
	return max(foreign-unknown, 0)
}

// deviceKey is a device name as EC2 identifies the slot: "/dev/sdf", "sdf" and "xvdf" are one.
func deviceKey(name string) string {
	name = strings.TrimPrefix(strings.TrimSpace(name), "/dev/")
	if rest, ok := strings.CutPrefix(name, "sd"); ok {
		name = "xvd" + rest
	}
	return name
}
