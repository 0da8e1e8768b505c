package cloud

import (
	"fmt"
	"slices"
)

// DeviceNames are the names volumes are attached under, the EBS CSI driver's series: /dev/xvdaa … /dev/xvddx
// (/dev/xvddx is the last name of the /dev/xvd[a-z][a-z] series EC2 allows for EBS). The controller hands them
// out; the node counts an instance's volume under one of them as the driver's. Nothing else in a cluster uses
// them: the root volume is /dev/xvda or /dev/sda1, node pools' extra volumes /dev/xvdb…, volumes attached by
// hand /dev/sdf….
func DeviceNames() []string {
	var names []string
	for _, first := range "abcd" {
		for _, second := range "abcdefghijklmnopqrstuvwxyz" {
			names = append(names, fmt.Sprintf("/dev/xvd%c%c", first, second))
			if first == 'd' && second == 'x' {
				return names
			}
		}
	}
	return names
}

// IsDeviceName reports whether name (with /dev/) is one of DeviceNames.
func IsDeviceName(name string) bool {
	return slices.Contains(DeviceNames(), name)
}
