// Package volumetypes is the table of EBS volume types and their bounds: sizes, IOPS, throughput and
// Multi-Attach, as EC2's CreateVolume documents them. fakecloud enforces them, and the driver's cloud layer
// checks a size against them so that a size no type allows is told apart from other refusals (CSI's
// OUT_OF_RANGE) without reading EC2's messages. It depends on nothing else in the project.
package volumetypes

import "fmt"

// Limits are EC2's bounds for one volume type. A zero MaxIOPS means IOPS cannot be set; a zero MaxThroughput
// means throughput cannot be set.
type Limits struct {
	MinSizeGiB, MaxSizeGiB                          int32
	MinIOPS, MaxIOPS, DefaultIOPS, IOPSPerGiB       int32
	IOPSRequired                                    bool
	MinThroughput, MaxThroughput, DefaultThroughput int32
	MultiAttach                                     bool
}

// Default is the type EC2 creates when a request names none.
const Default = "gp2"

// Names lists the types EC2 offers, in the order its error messages give them.
func Names() []string { return []string{"standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"} }

// Lookup returns the bounds of a type.
func Lookup(volumeType string) (Limits, bool) {
	switch volumeType {
	case "gp2":
		return Limits{MinSizeGiB: 1, MaxSizeGiB: 16384}, true
	case "gp3":
		return Limits{MinSizeGiB: 1, MaxSizeGiB: 65536, MinIOPS: 3000, MaxIOPS: 80000, DefaultIOPS: 3000, IOPSPerGiB: 500,
			MinThroughput: 125, MaxThroughput: 2000, DefaultThroughput: 125}, true
	case "io1":
		return Limits{MinSizeGiB: 4, MaxSizeGiB: 16384, MinIOPS: 100, MaxIOPS: 64000, IOPSPerGiB: 50, IOPSRequired: true, MultiAttach: true}, true
	case "io2":
		return Limits{MinSizeGiB: 4, MaxSizeGiB: 65536, MinIOPS: 100, MaxIOPS: 256000, IOPSPerGiB: 1000, IOPSRequired: true, MultiAttach: true}, true
	case "st1", "sc1":
		return Limits{MinSizeGiB: 125, MaxSizeGiB: 16384}, true
	case "standard":
		return Limits{MinSizeGiB: 1, MaxSizeGiB: 1024}, true
	}
	return Limits{}, false
}

// SizeError is a size outside its type's bounds.
type SizeError struct {
	Type     string
	SizeGiB  int32
	Min, Max int32
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s volumes are %d–%d GiB, not %d GiB", e.Type, e.Min, e.Max, e.SizeGiB)
}

// CheckSize reports a size the type ("" is Default) does not allow as a *SizeError; an unknown type is not
// checked (the cloud refuses it in its own words).
func CheckSize(volumeType string, sizeGiB int32) error {
	if volumeType == "" {
		volumeType = Default
	}
	lim, ok := Lookup(volumeType)
	if !ok || (sizeGiB >= lim.MinSizeGiB && sizeGiB <= lim.MaxSizeGiB) {
		return nil
	}
	return &SizeError{Type: volumeType, SizeGiB: sizeGiB, Min: lim.MinSizeGiB, Max: lim.MaxSizeGiB}
}
