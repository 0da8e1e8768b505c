package state

import (
	"fmt"
	"strings"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/volumetypes"
)

// limitsOf is EC2's bounds for a volume type (pkg/volumetypes, the table the driver checks sizes against too).
func limitsOf(volumeType string) (volumetypes.Limits, bool) { return volumetypes.Lookup(volumeType) }

// volumeSpec is what a volume is asked to be, by CreateVolume or ModifyVolume.
type volumeSpec struct {
	Type        string
	SizeGiB     int32
	Iops        *int32
	Throughput  *int32
	MultiAttach bool
}

// settle validates spec against its type's limits and returns the IOPS and throughput the volume gets.
func (spec volumeSpec) settle() (iops, throughput int32, err error) {
	lim, ok := limitsOf(spec.Type)
	if !ok {
		return 0, 0, ec2err.InvalidValue("volumeType", spec.Type, "Valid values are: "+strings.Join(volumetypes.Names(), ", "))
	}
	switch {
	case spec.SizeGiB < lim.MinSizeGiB:
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterValue,
			"The volume size is invalid for %s volumes: %d GiB. %s volumes must be at least %d GiB in size.", spec.Type, spec.SizeGiB, spec.Type, lim.MinSizeGiB)
	case spec.SizeGiB > lim.MaxSizeGiB:
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume of %dGiB is too large; maximum is %dGiB.", spec.SizeGiB, lim.MaxSizeGiB)
	}
	if iops, err = spec.settleIops(lim); err != nil {
		return 0, 0, err
	}
	if throughput, err = spec.settleThroughput(lim, iops); err != nil {
		return 0, 0, err
	}
	if spec.MultiAttach && !lim.MultiAttach {
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The volume type %s does not support Multi-Attach; use io1 or io2.", spec.Type)
	}
	return iops, throughput, nil
}

func (spec volumeSpec) settleIops(lim volumetypes.Limits) (int32, error) {
	if lim.MaxIOPS == 0 {
		if spec.Iops != nil {
			return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter iops is not supported for %s volumes.", spec.Type)
		}
		if spec.Type == "gp2" {
			return min(max(3*spec.SizeGiB, 100), 16000), nil
		}
		return 0, nil
	}
	if spec.Iops == nil {
		if lim.IOPSRequired {
			// EC2's answer, as users report it (io1 and io2 alike).
			return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter iops must be specified for %s volumes.", spec.Type)
		}
		return lim.DefaultIOPS, nil
	}
	iops := *spec.Iops
	switch {
	case iops > lim.MaxIOPS:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume iops of %d is too high; maximum is %d", iops, lim.MaxIOPS)
	case iops < lim.MinIOPS:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume iops of %d is too low; minimum is %d", iops, lim.MinIOPS)
	case iops > lim.DefaultIOPS && int64(iops) > int64(lim.IOPSPerGiB)*int64(spec.SizeGiB):
		// A baseline (gp3's 3000) is allowed at any size; above it, IOPS scale with size.
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Iops to volume size ratio of %s is too high; maximum is %d",
			ratio(float64(iops)/float64(spec.SizeGiB)), lim.IOPSPerGiB)
	}
	return iops, nil
}

func (spec volumeSpec) settleThroughput(lim volumetypes.Limits, iops int32) (int32, error) {
	if lim.MaxThroughput == 0 {
		if spec.Throughput != nil {
			return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter throughput is not supported for %s volumes.", spec.Type)
		}
		return 0, nil
	}
	if spec.Throughput == nil {
		return lim.DefaultThroughput, nil
	}
	tp := *spec.Throughput
	switch {
	case tp > lim.MaxThroughput:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume throughput of %d is too high; maximum is %d", tp, lim.MaxThroughput)
	case tp < lim.MinThroughput:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume throughput of %d is too low; minimum is %d", tp, lim.MinThroughput)
	case float64(tp)/float64(iops) > 0.25:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Throughput (MiBps) to iops ratio of %s is too high; maximum is 0.25 MiBps per iops.",
			ratio(float64(tp)/float64(iops)))
	}
	return tp, nil
}

func ratio(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", f), "0"), ".")
}
