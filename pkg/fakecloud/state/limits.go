package state

import (
	"fmt"
	"strings"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// typeLimits are EC2's bounds for one volume type (see the reference notes, from the CreateVolume docs).
type typeLimits struct {
	minSize, maxSize int32
	// iops: 0 maxIops means IOPS cannot be set.
	minIops, maxIops, defaultIops, iopsPerGiB int32
	iopsRequired                              bool
	// throughput: 0 maxThroughput means throughput cannot be set.
	minThroughput, maxThroughput, defaultThroughput int32
	multiAttach                                     bool
}

// volumeTypes lists the types EC2 offers, in the order its error messages give them.
var volumeTypes = []string{"standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"}

func limitsOf(volumeType string) (typeLimits, bool) {
	switch volumeType {
	case "gp2":
		return typeLimits{minSize: 1, maxSize: 16384}, true
	case "gp3":
		return typeLimits{minSize: 1, maxSize: 65536, minIops: 3000, maxIops: 80000, defaultIops: 3000, iopsPerGiB: 500,
			minThroughput: 125, maxThroughput: 2000, defaultThroughput: 125}, true
	case "io1":
		return typeLimits{minSize: 4, maxSize: 16384, minIops: 100, maxIops: 64000, iopsPerGiB: 50, iopsRequired: true, multiAttach: true}, true
	case "io2":
		return typeLimits{minSize: 4, maxSize: 65536, minIops: 100, maxIops: 256000, iopsPerGiB: 1000, iopsRequired: true, multiAttach: true}, true
	case "st1", "sc1":
		return typeLimits{minSize: 125, maxSize: 16384}, true
	case "standard":
		return typeLimits{minSize: 1, maxSize: 1024}, true
	}
	return typeLimits{}, false
}

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
		return 0, 0, ec2err.InvalidValue("volumeType", spec.Type, "Valid values are: "+strings.Join(volumeTypes, ", "))
	}
	switch {
	case spec.SizeGiB < lim.minSize:
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterValue,
			"The volume size is invalid for %s volumes: %d GiB. %s volumes must be at least %d GiB in size.", spec.Type, spec.SizeGiB, spec.Type, lim.minSize)
	case spec.SizeGiB > lim.maxSize:
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume of %dGiB is too large; maximum is %dGiB.", spec.SizeGiB, lim.maxSize)
	}
	if iops, err = spec.settleIops(lim); err != nil {
		return 0, 0, err
	}
	if throughput, err = spec.settleThroughput(lim, iops); err != nil {
		return 0, 0, err
	}
	if spec.MultiAttach && !lim.multiAttach {
		return 0, 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The volume type %s does not support Multi-Attach; use io1 or io2.", spec.Type)
	}
	return iops, throughput, nil
}

func (spec volumeSpec) settleIops(lim typeLimits) (int32, error) {
	if lim.maxIops == 0 {
		if spec.Iops != nil {
			return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter iops is not supported for %s volumes.", spec.Type)
		}
		if spec.Type == "gp2" {
			return min(max(3*spec.SizeGiB, 100), 16000), nil
		}
		return 0, nil
	}
	if spec.Iops == nil {
		if lim.iopsRequired {
			return 0, ec2err.Missing("iops")
		}
		return lim.defaultIops, nil
	}
	iops := *spec.Iops
	switch {
	case iops > lim.maxIops:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume iops of %d is too high; maximum is %d", iops, lim.maxIops)
	case iops < lim.minIops:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume iops of %d is too low; minimum is %d", iops, lim.minIops)
	case iops > lim.defaultIops && int64(iops) > int64(lim.iopsPerGiB)*int64(spec.SizeGiB):
		// A baseline (gp3's 3000) is allowed at any size; above it, IOPS scale with size.
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Iops to volume size ratio of %s is too high; maximum is %d",
			ratio(float64(iops)/float64(spec.SizeGiB)), lim.iopsPerGiB)
	}
	return iops, nil
}

func (spec volumeSpec) settleThroughput(lim typeLimits, iops int32) (int32, error) {
	if lim.maxThroughput == 0 {
		if spec.Throughput != nil {
			return 0, ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter throughput is not supported for %s volumes.", spec.Type)
		}
		return 0, nil
	}
	if spec.Throughput == nil {
		return lim.defaultThroughput, nil
	}
	tp := *spec.Throughput
	switch {
	case tp > lim.maxThroughput:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume throughput of %d is too high; maximum is %d", tp, lim.maxThroughput)
	case tp < lim.minThroughput:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Volume throughput of %d is too low; minimum is %d", tp, lim.minThroughput)
	case float64(tp)/float64(iops) > 0.25:
		return 0, ec2err.New(ec2err.CodeInvalidParameterValue, "Throughput (MiBps) to iops ratio of %s is too high; maximum is 0.25 MiBps per iops.",
			ratio(float64(tp)/float64(iops)))
	}
	return tp, nil
}

func ratio(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", f), "0"), ".")
}
