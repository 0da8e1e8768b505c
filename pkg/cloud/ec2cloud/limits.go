package ec2cloud

import "strings"

// EC2 reports no attachment limit; it follows from the instance's hypervisor. Nitro instances share 28 slots
// between EBS volumes and network interfaces; Xen instances take up to 40 EBS volumes. Both lose one slot to the
// root volume, and Nitro one more to the primary network interface.
const (
	nitroAttachmentLimit = 28 - 1 - 1
	xenAttachmentLimit   = 40 - 1
)

// xenFamilies are the instance families on the Xen hypervisor; every newer family is Nitro.
var xenFamilies = []string{"c1", "c3", "c4", "d2", "g2", "g3", "h1", "i2", "i3", "m1", "m2", "m3", "m4", "p2", "p3", "r3", "r4", "t1", "t2", "x1", "x1e"}

// attachmentLimit is the number of data volumes an instance of the given type can hold.
func attachmentLimit(instanceType string) int {
	family, _, _ := strings.Cut(instanceType, ".")
	for _, f := range xenFamilies {
		if family == f {
			return xenAttachmentLimit
		}
	}
	return nitroAttachmentLimit
}
