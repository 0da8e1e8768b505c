package state

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// InstanceView is an instance with the volumes attached to it, as DescribeInstances shows it.
type InstanceView struct {
	Instance
	Attachments []Attachment
}

func (s *State) instance(id string) (*Instance, error) {
	if err := checkID("i", ec2err.CodeInvalidInstanceIDMalformed, id); err != nil {
		return nil, err
	}
	in, ok := s.instances[id]
	if !ok {
		return nil, ec2err.New(ec2err.CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", id)
	}
	return in, nil
}

func (s *State) putInstance(spec InstanceSpec) *Instance {
	in := &Instance{ID: spec.ID, Zone: spec.Zone, InstanceType: spec.InstanceType, LaunchTime: s.clock.Now(), State: InstanceRunning,
		NetworkInterfaces: spec.NetworkInterfaces}
	if in.InstanceType == "" {
		in.InstanceType = DefaultInstanceType
	}
	in.AttachmentLimit = s.attachmentLimit(in.InstanceType, spec.AttachmentLimit)
	s.recordStartDevices(in)
	s.instances[in.ID] = in
	s.instanceIDs.insert(in.ID)
	s.markDirty(kindInstance, in.ID)
	return in
}

// attachmentLimit is how many data volumes an instance holds besides its root volume: the one asked, else the
// configured default, else its type's (the one DescribeInstanceTypes reports; the type was checked on the way in).
func (s *State) attachmentLimit(instanceType string, asked int) int {
	if asked > 0 {
		return asked
	}
	if s.cfg.DefaultAttachmentLimit > 0 {
		return s.cfg.DefaultAttachmentLimit
	}
	info, _ := instancetypes.Lookup(instanceType)
	return info.VolumeLimit()
}

// RegisterInstance adds (or updates) an instance at run time: a node joining a test cluster. An instance that
// is alive keeps its state, launch time and tags; one being terminated (or terminated) is launched afresh.
func (s *State) RegisterInstance(spec InstanceSpec) (Instance, error) {
	var out Instance
	err := s.mutate(func(time.Time) error {
		if err := checkID("i", ec2err.CodeInvalidInstanceIDMalformed, spec.ID); err != nil {
			return err
		}
		if !s.cfg.hasZone(spec.Zone) {
			return ec2err.New(ec2err.CodeInvalidZoneNotFound, "The zone '%s' does not exist.", spec.Zone)
		}
		if err := checkInstanceType(spec.InstanceType); err != nil {
			return err
		}
		if err := checkInterfaces(spec.NetworkInterfaces); err != nil {
			return err
		}
		old, exists := s.instances[spec.ID]
		if exists && old.Zone != spec.Zone && len(s.attachmentsOf(spec.ID)) > 0 {
			return ec2err.New(ec2err.CodeIncorrectInstanceState, "Instance %s has volumes attached and cannot move to zone %s", spec.ID, spec.Zone)
		}
		in := s.putInstance(spec)
		if exists && attachable(old) == nil {
			in.LaunchTime, in.Tags = old.LaunchTime, old.Tags
			in.State, in.DueAt, in.StateReason, in.TransitionReason = old.State, old.DueAt, old.StateReason, old.TransitionReason
			in.StartDevices = old.StartDevices
		}
		out = *in
		klog.InfoS("Instance registered", "instanceID", spec.ID, "zone", spec.Zone, "attachmentLimit", out.AttachmentLimit, "state", out.State)
		return nil
	})
	return out, err
}

// RemoveInstance terminates an instance (its attachments end as TerminateInstances ends them) and forgets it at
// once rather than after the terminated retention: a node removed from a test cluster.
func (s *State) RemoveInstance(id string) error {
	return s.mutate(func(now time.Time) error {
		in, err := s.instance(id)
		if err != nil {
			return err
		}
		if attachable(in) == nil {
			s.terminate(now, in, true)
		}
		s.forgetInstance(id)
		klog.InfoS("Instance removed", "instanceID", id)
		return nil
	})
}

// recordStartDevices keeps the instance's block device mapping as the instance goes running (launched, or
// started again): every volume holding one of its slots then, in order of attachment. EC2's instance metadata
// lists these until the next start, whatever is attached or detached meanwhile.
func (s *State) recordStartDevices(in *Instance) {
	atts := s.attachmentsOf(in.ID)
	slices.SortStableFunc(atts, func(a, b Attachment) int {
		if c := a.AttachTime.Compare(b.AttachTime); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
	in.StartDevices = nil
	for _, a := range atts {
		if a.Device == rootDevice {
			// The root volume is block-device-mapping/ami and root, not an ebsN.
			continue
		}
		in.StartDevices = append(in.StartDevices, strings.TrimPrefix(a.Device, "/dev/"))
	}
}

var instanceFields = fields[InstanceView]{
	"instance-id":         func(v *InstanceView) []string { return []string{v.ID} },
	"availability-zone":   func(v *InstanceView) []string { return []string{v.Zone} },
	"instance-type":       func(v *InstanceView) []string { return []string{v.InstanceType} },
	"instance-state-name": func(v *InstanceView) []string { return []string{v.State} },
	"instance-state-code": func(v *InstanceView) []string {
		return []string{strconv.Itoa(int(InstanceStateCode(v.State)))}
	},
	"image-id":       func(v *InstanceView) []string { return []string{v.ImageID()} },
	"reservation-id": func(v *InstanceView) []string { return []string{v.ReservationID()} },
	"client-token": func(v *InstanceView) []string {
		if v.Launch == nil {
			return nil
		}
		return []string{v.Launch.ClientToken}
	},
	"block-device-mapping.volume-id": func(v *InstanceView) []string {
		return mapAttachments(v, func(a Attachment) string { return a.VolumeID })
	},
	"block-device-mapping.device-name": func(v *InstanceView) []string {
		return mapAttachments(v, func(a Attachment) string { return a.Device })
	},
	"block-device-mapping.status": func(v *InstanceView) []string {
		return mapAttachments(v, func(a Attachment) string { return a.State })
	},
	"block-device-mapping.delete-on-termination": func(v *InstanceView) []string {
		return mapAttachments(v, func(a Attachment) string { return strconv.FormatBool(a.DeleteOnTermination) })
	},
	"block-device-mapping.attach-time": func(v *InstanceView) []string {
		var out []string
		for _, a := range v.Attachments {
			out = append(out, timeValues(a.AttachTime)...)
		}
		return out
	},
	"architecture":         func(v *InstanceView) []string { return []string{v.Architecture()} },
	"launch-time":          func(v *InstanceView) []string { return timeValues(v.LaunchTime) },
	"reason":               func(v *InstanceView) []string { return []string{v.TransitionReason} },
	"state-reason-code":    func(v *InstanceView) []string { return []string{v.StateReason} },
	"state-reason-message": func(v *InstanceView) []string { return []string{StateReasonMessage(v.StateReason)} },
	"root-device-name":     func(*InstanceView) []string { return []string{rootDevice} },
	"root-device-type":     func(*InstanceView) []string { return []string{RootDeviceType} },
	"tenancy":              func(*InstanceView) []string { return []string{Tenancy} },
	// What no fakecloud instance has: a service managing it, a spot or scheduled lifecycle, product codes, a
	// platform (none is Windows), a kernel or ramdisk of its own (HVM).
	"operator.managed":         func(*InstanceView) []string { return []string{"false"} },
	"operator.principal":       noValues[InstanceView],
	"instance-lifecycle":       noValues[InstanceView],
	"spot-instance-request-id": noValues[InstanceView],
	"product-code":             noValues[InstanceView],
	"product-code.type":        noValues[InstanceView],
	"platform":                 noValues[InstanceView],
	"kernel-id":                noValues[InstanceView],
	"ramdisk-id":               noValues[InstanceView],
	"launch-index": func(v *InstanceView) []string {
		if v.Launch == nil {
			return []string{"0"}
		}
		return []string{strconv.Itoa(int(v.Launch.LaunchIndex))}
	},
}

// Every fakecloud instance is EBS-backed on shared hardware.
const (
	RootDeviceType = "ebs"
	Tenancy        = "default"
)

// RootDevice is the root device name of every instance.
const RootDevice = rootDevice

func mapAttachments(v *InstanceView, get func(Attachment) string) []string {
	out := make([]string, 0, len(v.Attachments))
	for _, a := range v.Attachments {
		out = append(out, get(a))
	}
	return out
}

// DescribeInstances lists instances with their attached volumes.
func (s *State) DescribeInstances(in DescribeInput) ([]InstanceView, string, error) {
	var (
		out  []InstanceView
		next string
		err  error
	)
	s.read(func(time.Time) {
		var match func(*InstanceView) bool
		byAccount := withField(instanceFields, "owner-id", func(*InstanceView) []string { return []string{s.cfg.AccountID} })
		byZoneID := withField(byAccount, "availability-zone-id", func(v *InstanceView) []string { return s.zoneIDs(v.Zone) })
		if match, err = byZoneID.compile(in.Filters, func(v *InstanceView) []Tag { return v.Tags }); err != nil {
			return
		}
		byInstance := s.attachmentsByInstance()
		viewOf := func(id string) *InstanceView { return s.viewOf(id, byInstance) }
		var ids []string
		if len(in.IDs) > 0 {
			if ids, err = s.knownInstances(in.IDs); err != nil {
				return
			}
			if _, err = instancePages.pageSize(in.Page, true); err != nil {
				return
			}
		} else {
			ids, next, err = instancePages.page(&s.instanceIDs, in.Page, false, func(id string) bool { return match(viewOf(id)) })
		}
		for _, id := range ids {
			if v := viewOf(id); match(v) {
				out = append(out, *v)
			}
		}
	})
	return out, next, err
}

// attachmentsByInstance gives every instance its attachments, in one pass over the volumes.
func (s *State) attachmentsByInstance() map[string][]Attachment {
	byInstance := map[string][]Attachment{}
	for _, id := range s.volumeIDs.ids {
		for _, a := range s.volumes[id].Attachments {
			byInstance[a.InstanceID] = append(byInstance[a.InstanceID], a)
		}
	}
	return byInstance
}

// viewOf is a copy of an instance with its attachments, to hand out.
func (s *State) viewOf(id string, byInstance map[string][]Attachment) *InstanceView {
	inst := *s.instances[id]
	inst.Tags = slices.Clone(inst.Tags)
	inst.StartDevices = slices.Clone(inst.StartDevices)
	if inst.Launch != nil {
		l := *inst.Launch
		inst.Launch = &l
	}
	return &InstanceView{Instance: inst, Attachments: slices.Clone(byInstance[id])}
}

func (s *State) knownInstances(ids []string) ([]string, error) {
	var missing, out []string
	for _, id := range ids {
		if err := checkID("i", ec2err.CodeInvalidInstanceIDMalformed, id); err != nil {
			return nil, err
		}
		if _, ok := s.instances[id]; !ok {
			missing = append(missing, id)
			continue
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if len(missing) > 0 {
		return nil, ec2err.New(ec2err.CodeInvalidInstanceIDNotFound, "The instance IDs '%s' do not exist", strings.Join(missing, ", "))
	}
	return out, nil
}

// Region is the region this cloud serves.
func (s *State) Region() string { return s.cfg.Region }

// ZoneFilter selects zones for DescribeAvailabilityZones.
type ZoneFilter struct {
	Names   []string
	IDs     []string
	Filters []Filter
}

// What every fakecloud zone is: an availability zone of the region (no Local or Wavelength Zones, which have
// parents, messages and opt-in), available.
const (
	ZoneState       = "available"
	ZoneType        = "availability-zone"
	ZoneOptInStatus = "opt-in-not-required"
)

var zoneFields = fields[Zone]{
	"zone-name":      func(z *Zone) []string { return []string{z.Name} },
	"zone-id":        func(z *Zone) []string { return []string{z.ID} },
	"state":          func(*Zone) []string { return []string{ZoneState} },
	"zone-type":      func(*Zone) []string { return []string{ZoneType} },
	"opt-in-status":  func(*Zone) []string { return []string{ZoneOptInStatus} },
	"message":        noValues[Zone],
	"parent-zone-id": noValues[Zone],
	// The name too: an availability zone has no parent.
	"parent-zone-name": noValues[Zone],
}

// ZoneGroup is the zone group of the region's availability zones, as EC2 names it.
func (s *State) ZoneGroup() string { return s.cfg.Region + "-zg-1" }

// DescribeAvailabilityZones lists the region's zones.
func (s *State) DescribeAvailabilityZones(in ZoneFilter) ([]Zone, error) {
	regionFields := fields[Zone]{
		"region-name": func(*Zone) []string { return []string{s.cfg.Region} },
		"group-name":  func(*Zone) []string { return []string{s.ZoneGroup()} },
	}
	for k, f := range zoneFields {
		regionFields[k] = f
	}
	match, err := regionFields.compile(in.Filters, func(*Zone) []Tag { return nil })
	if err != nil {
		return nil, err
	}
	for _, n := range in.Names {
		if !s.cfg.hasZone(n) {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "Invalid availability zone: [%s]", n)
		}
	}
	for _, id := range in.IDs {
		if _, ok := s.cfg.zoneByID(id); !ok {
			return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "Invalid availability zone ID: [%s]", id)
		}
	}
	var out []Zone
	for _, z := range s.cfg.Zones {
		if len(in.Names) > 0 && !slices.Contains(in.Names, z.Name) || len(in.IDs) > 0 && !slices.Contains(in.IDs, z.ID) {
			continue
		}
		if match(&z) {
			out = append(out, z)
		}
	}
	return out, nil
}

// Zones are the region's zones.
func (s *State) Zones() []Zone { return slices.Clone(s.cfg.Zones) }

// AccountID owns every resource of this cloud.
func (s *State) AccountID() string { return s.cfg.AccountID }

// registeredImageID is the image a registered instance reports: no launch chose one of the catalog's.
const registeredImageID = "ami-00000000000000000"

// ImageID is the image the instance runs.
func (in *Instance) ImageID() string {
	if in.Launch != nil {
		return in.Launch.ImageID
	}
	return registeredImageID
}

// ReservationID is the instance's reservation: its launch's, or one of its own for a registered instance.
func (in *Instance) ReservationID() string {
	if in.Launch != nil {
		return in.Launch.ReservationID
	}
	return "r-" + strings.TrimPrefix(in.ID, "i-")
}

// Architecture is the instance's processor architecture, its type's (a launch matched the image to it).
func (in *Instance) Architecture() string {
	info, ok := instancetypes.Lookup(in.InstanceType)
	if !ok {
		return instancetypes.ArchX86_64
	}
	return info.Architecture
}
