package driver

import (
	"math"

	"github.com/diskforge/diskforge/pkg/volumetypes"
)

// DefaultVolumeType is the type of a disk whose class names none: gp3, as the EBS driver chooses (EC2's own
// default, for a request naming none, is gp2).
const DefaultVolumeType = "gp3"

// iopsPerGB turns a class's iopsPerGB into the disk's IOPS as the EBS driver does, so that any claim size
// provisions: the product is capped at the type's maximum, total and per GiB; below the type's minimum it is
// refused, or raised to the minimum when the class allows it (allowAutoIOPSPerGBIncrease), which may cost more
// than the class asked for.
func iopsPerGB(volumeType string, sizeGiB, perGB int32, allowIncrease bool) (int32, error) {
	lim, ok := volumetypes.Lookup(volumeType)
	if !ok {
		// The cloud names the unknown type in its refusal.
		return int32(min(int64(perGB)*int64(sizeGiB), math.MaxInt32)), nil
	}
	if lim.MaxIOPS == 0 {
		return 0, invalidParam("parameter %q applies to io1, io2 and gp3 volumes, not %s", ParamIOPSPerGB, volumeType)
	}
	// In 64 bits: a class's iopsPerGB times 64 TiB does not fit in 32.
	iops := min(int64(perGB)*int64(sizeGiB), int64(lim.MaxIOPS), int64(lim.IOPSPerGiB)*int64(sizeGiB))
	if iops < int64(lim.MinIOPS) {
		if !allowIncrease {
			return 0, invalidParam("%d GiB at %s %d is %d IOPS, below the %d a %s volume needs (parameter %q raises it)",
				sizeGiB, ParamIOPSPerGB, perGB, iops, lim.MinIOPS, volumeType, ParamAllowAutoIOPSPerGBIncrease)
		}
		iops = int64(lim.MinIOPS)
	}
	return int32(iops), nil
}
