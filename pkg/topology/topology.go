// Package topology holds the driver's topology keys, the choice of a zone for a new volume from CSI
// accessibility requirements, and the discovery of a node's identity and zone.
package topology

import (
	"errors"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Keys of topology segments. The driver's own key is what its volumes are constrained by; the well-known
// Kubernetes key is reported too, so that StorageClass allowedTopologies written with it work.
const (
	ZoneKey          = "topology.diskforge.io/zone"
	WellKnownZoneKey = "topology.kubernetes.io/zone"
)

// ErrNoZone means the requirements name no zone the cloud offers.
var ErrNoZone = errors.New("no usable zone")

// Segments is the accessible topology of a volume or node in zone.
func Segments(zone string) map[string]string {
	return map[string]string{ZoneKey: zone, WellKnownZoneKey: zone}
}

// Accessible is the accessible topology of a volume in zone, as CreateVolume replies it.
func Accessible(zone string) []*csi.Topology {
	return []*csi.Topology{{Segments: Segments(zone)}}
}

// zoneOf reads the zone of a segment set; both keys must agree when both are present.
func zoneOf(t *csi.Topology) (string, error) {
	own, wellKnown := t.GetSegments()[ZoneKey], t.GetSegments()[WellKnownZoneKey]
	switch {
	case own != "" && wellKnown != "" && own != wellKnown:
		return "", fmt.Errorf("topology segment names zone %q under %s and %q under %s", own, ZoneKey, wellKnown, WellKnownZoneKey)
	case own != "":
		return own, nil
	}
	return wellKnown, nil
}

// ChooseZone picks the zone of a new volume: the first preferred zone the cloud offers, then the first
// requisite one, and without requirements the first offered zone. Requirements that name only zones the cloud
// does not offer give ErrNoZone rather than a volume somewhere the pod cannot run.
func ChooseZone(req *csi.TopologyRequirement, offered []string) (string, error) {
	if len(offered) == 0 {
		return "", fmt.Errorf("%w: the cloud offers no zones", ErrNoZone)
	}
	var named []string
	for _, list := range [][]*csi.Topology{req.GetPreferred(), req.GetRequisite()} {
		for _, t := range list {
			zone, err := zoneOf(t)
			if err != nil {
				return "", err
			}
			if zone == "" {
				continue
			}
			named = append(named, zone)
			if slices.Contains(offered, zone) {
				return zone, nil
			}
		}
	}
	if len(named) > 0 {
		return "", fmt.Errorf("%w: requirements name %v, the cloud offers %v", ErrNoZone, named, offered)
	}
	return offered[0], nil
}
