package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

// RunInstances launches instances with no compute: each is pending for Durations.InstanceStart, then running, in
// the zone asked (fakecloud has no VPC, so a SubnetId is refused; without a zone the region's first is taken).
// Its block device mapping (the image's root volume, changed or added to by the request's) becomes volumes made
// with their files before the reply, in use and attaching to the instance as it launches, each deleted at its
// instance's termination when DeleteOnTermination (true unless the request says otherwise). The root volume is a
// real volume here, at the image's root device, and does not count against the attachment limit, which counts
// data volumes as it does for registered instances. A ClientToken binds the reservation for as long as its
// instances are known (until a terminated one vanishes).

// LaunchDevice is one BlockDeviceMapping entry of RunInstances.
type LaunchDevice struct {
	Device   string
	NoDevice bool
	// Ebs is the volume asked (its size, type, performance, encryption and snapshot); nil when the entry has no Ebs
	// member, which is refused unless NoDevice: fakecloud instances have no instance store.
	Ebs                 *CreateVolumeInput
	DeleteOnTermination *bool
}

// RunInstancesInput is RunInstances' request.
type RunInstancesInput struct {
	ImageID      string
	InstanceType string
	MinCount     int32
	MaxCount     int32
	Zone         string
	ZoneID       string
	SubnetID     string
	Devices      []LaunchDevice
	InstanceTags []Tag
	VolumeTags   []Tag
	ClientToken  string
	DryRun       bool
}

// hash fingerprints what a ClientToken binds. The zone is left out: EC2 compares every parameter "other than the
// Region or Availability Zone".
func (in RunInstancesInput) hash() string {
	in.ClientToken, in.DryRun, in.Zone, in.ZoneID = "", false, "", ""
	raw, _ := json.Marshal(in)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Reservation is RunInstances' reply: the instances launched together, in launch order.
type Reservation struct {
	ID        string
	Instances []InstanceView
}

// plannedDevice is one volume of a planned instance and where it attaches.
type plannedDevice struct {
	vol                 *Volume
	device              string
	deleteOnTermination bool
}

// launchPlan is a checked request with its IDs reserved: what the files are made for, then what is recorded.
type launchPlan struct {
	in            RunInstancesInput
	image         Image
	instanceType  string
	zone          string
	reservationID string
	instanceIDs   []string
	devices       [][]plannedDevice
}

// RunInstances checks the request and reserves its IDs under the lock, makes the volumes' files without it, then
// records the instances and volumes; the reply is sent once they are committed.
func (s *State) RunInstances(in RunInstancesInput) (Reservation, error) {
	plan := func(time.Time) (Reservation, *launchPlan, chan struct{}, error) { return s.planLaunch(in) }
	return createOnce(s, plan, s.releaseLaunch, s.launch)
}

// planLaunch answers a replayed ClientToken with its reservation (or a channel to wait on while that request is
// in flight), or checks a new request in full and reserves its IDs.
func (s *State) planLaunch(in RunInstancesInput) (Reservation, *launchPlan, chan struct{}, error) {
	if len(in.ClientToken) > maxClientToken {
		return Reservation{}, nil, nil, ec2err.InvalidValue("clientToken", in.ClientToken, "The client token must be at most 64 characters.")
	}
	if in.ClientToken != "" {
		if w, ok := s.launches[in.ClientToken]; ok {
			return Reservation{}, nil, w, nil
		}
		if l := s.launchOfToken(in.ClientToken); l != nil {
			if l.ParamsHash != in.hash() {
				return Reservation{}, nil, nil, ec2err.New(ec2err.CodeIdempotentParameterMismatch,
					"The client token '%s' was used with different parameters for reservation '%s'.", in.ClientToken, l.ReservationID)
			}
			if in.DryRun {
				return Reservation{}, nil, nil, ec2err.DryRun()
			}
			return s.reservation(l.ReservationID), nil, nil, nil
		}
	}
	plan, err := s.checkLaunch(in)
	if err != nil {
		return Reservation{}, nil, nil, err
	}
	if in.DryRun {
		return Reservation{}, nil, nil, ec2err.DryRun()
	}
	template := plan.devices[0]
	plan.devices = nil
	plan.reservationID = newID("r")
	for range plan.instanceIDs {
		devs := make([]plannedDevice, len(template))
		for j, d := range template {
			v := *d.vol
			v.ID = s.reserveVolumeID()
			devs[j] = plannedDevice{vol: &v, device: d.device, deleteOnTermination: d.deleteOnTermination}
		}
		plan.devices = append(plan.devices, devs)
	}
	for i := range plan.instanceIDs {
		plan.instanceIDs[i] = s.uniqueID("i", func(id string) bool { _, ok := s.instances[id]; _, r := s.reserved[id]; return ok || r })
		s.reserved[plan.instanceIDs[i]] = struct{}{}
	}
	if in.ClientToken != "" {
		s.launches[in.ClientToken] = make(chan struct{})
	}
	return Reservation{}, plan, nil, nil
}

// checkLaunch validates a new request: its image, type, count, zone, block devices and tags. The plan it returns
// holds one instance's devices (without IDs) and as many empty instance IDs as will be launched.
func (s *State) checkLaunch(in RunInstancesInput) (*launchPlan, error) {
	im, err := imageByID(in.ImageID)
	if err != nil {
		return nil, err
	}
	plan := &launchPlan{in: in, image: im, instanceType: in.InstanceType}
	if plan.instanceType == "" {
		plan.instanceType = instancetypes.LaunchDefault
	}
	info, ok := instancetypes.Lookup(plan.instanceType)
	if !ok {
		return nil, ec2err.New(ec2err.CodeInvalidParameterValue, "Invalid value '%s' for InstanceType.", plan.instanceType)
	}
	if info.Architecture != im.Architecture {
		return nil, ec2err.New(ec2err.CodeInvalidParameterValue,
			"The architecture '%s' of the specified instance type does not match the architecture '%s' of the specified AMI. Specify an instance type and an AMI that have matching architectures, and try again.",
			info.Architecture, im.Architecture)
	}
	if plan.zone, err = s.launchZone(in); err != nil {
		return nil, err
	}
	devices, err := s.planDevices(in, im, plan.zone, s.attachmentLimit(plan.instanceType, 0))
	if err != nil {
		return nil, err
	}
	plan.devices = [][]plannedDevice{devices}
	if err := validateTags(in.InstanceTags); err != nil {
		return nil, err
	}
	n, err := s.launchCount(in, info)
	if err != nil {
		return nil, err
	}
	plan.instanceIDs = make([]string, n)
	return plan, nil
}

// launchCount is how many instances to launch: MaxCount, or as many above MinCount as the vCPU limit leaves room
// for, as EC2 launches "the largest possible number of instances above the specified minimum count".
func (s *State) launchCount(in RunInstancesInput, info instancetypes.Info) (int, error) {
	switch {
	case in.MinCount < 1:
		return 0, ec2err.InvalidValue("MinCount", strconv.Itoa(int(in.MinCount)), "The minimum count must be at least 1.")
	case in.MaxCount < in.MinCount:
		return 0, ec2err.InvalidValue("MaxCount", strconv.Itoa(int(in.MaxCount)), "The maximum count must not be less than the minimum count.")
	}
	used := 0
	for _, inst := range s.instances {
		if inst.State != InstanceStopped && inst.State != InstanceTerminated {
			i, _ := instancetypes.Lookup(inst.InstanceType)
			used += int(i.VCPUs)
		}
	}
	fit := max(s.cfg.VcpuLimit-used, 0) / max(int(info.VCPUs), 1)
	if fit < int(in.MinCount) {
		return 0, ec2err.New(ec2err.CodeVcpuLimitExceeded,
			"You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
			s.cfg.VcpuLimit)
	}
	return min(int(in.MaxCount), fit), nil
}

// launchZone is the zone asked by name or ID, or the region's first. fakecloud has no VPC: every subnet is unknown.
func (s *State) launchZone(in RunInstancesInput) (string, error) {
	if in.SubnetID != "" {
		return "", ec2err.New(ec2err.CodeInvalidSubnetIDNotFound, "The subnet ID '%s' does not exist", in.SubnetID)
	}
	if in.Zone == "" && in.ZoneID == "" {
		return s.cfg.Zones[0].Name, nil
	}
	return s.resolveZone(in.Zone, in.ZoneID)
}

// planDevices merges the request's block device mapping into the image's: the root device's entry changes the
// root volume (its size at least the image's), any other adds a data volume, NoDevice drops one. The root comes
// first, then the request's entries in order.
func (s *State) planDevices(in RunInstancesInput, im Image, zone string, limit int) ([]plannedDevice, error) {
	rootSize := im.RootSizeGiB
	root := CreateVolumeInput{SizeGiB: &rootSize, VolumeType: im.RootType, Tags: in.VolumeTags}
	rootDOT := true
	var data []LaunchDevice
	seen := map[string]bool{}
	for _, d := range in.Devices {
		if seen[d.Device] {
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping, "The device '%s' is mapped more than once.", d.Device)
		}
		seen[d.Device] = true
		switch {
		case d.Device != im.RootDevice && !deviceName.MatchString(d.Device):
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping, "Invalid device name %s", d.Device)
		case d.NoDevice && d.Device == im.RootDevice:
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping, "The root device %s cannot be suppressed.", d.Device)
		case d.NoDevice:
			continue
		case d.Ebs == nil:
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping,
				"The mapping for %s needs Ebs: fakecloud instances have no instance store.", d.Device)
		case d.Device != im.RootDevice:
			data = append(data, d)
			continue
		case d.Ebs.SnapshotID != "":
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping, "snapshotId cannot be modified on root device")
		case d.Ebs.SizeGiB != nil && *d.Ebs.SizeGiB < im.RootSizeGiB:
			return nil, ec2err.New(ec2err.CodeInvalidBlockDeviceMapping,
				"Volume of size %dGB is smaller than the root volume of image '%s', expect size >= %dGB", *d.Ebs.SizeGiB, im.ID, im.RootSizeGiB)
		}
		if d.Ebs.SizeGiB != nil {
			root.SizeGiB = d.Ebs.SizeGiB
		}
		if d.Ebs.VolumeType != "" {
			root.VolumeType = d.Ebs.VolumeType
		}
		root.Iops, root.Throughput, root.Encrypted, root.KmsKeyID = d.Ebs.Iops, d.Ebs.Throughput, d.Ebs.Encrypted, d.Ebs.KmsKeyID
		if d.DeleteOnTermination != nil {
			rootDOT = *d.DeleteOnTermination
		}
	}
	if len(data) > limit {
		return nil, ec2err.New(ec2err.CodeAttachmentLimitExceeded,
			"The block device mapping has %d data volumes; the instance type holds at most %d besides its root volume.",
			len(data), limit)
	}
	v, err := s.shapeVolume(root, zone)
	if err != nil {
		return nil, err
	}
	out := []plannedDevice{{vol: v, device: im.RootDevice, deleteOnTermination: rootDOT}}
	for _, d := range data {
		spec := *d.Ebs
		spec.Tags = in.VolumeTags
		v, err := s.shapeVolume(spec, zone)
		if err != nil {
			return nil, err
		}
		out = append(out, plannedDevice{vol: v, device: d.Device, deleteOnTermination: d.DeleteOnTermination == nil || *d.DeleteOnTermination})
	}
	return out, nil
}

// launch makes the planned volumes' files without the lock (removing them again if one fails), then records the
// instances, pending, and their volumes, attaching.
func (s *State) launch(plan *launchPlan) (Reservation, error) {
	var made []string
	var failed *Volume
	var ferr error
	for _, devs := range plan.devices {
		for _, d := range devs {
			if ferr = s.createFile(d.vol); ferr != nil {
				failed = d.vol
				break
			}
			made = append(made, d.vol.ID)
		}
		if ferr != nil {
			break
		}
	}
	if ferr != nil {
		ctx, cancel := ioCtx()
		for _, id := range made {
			if err := s.backend.DeleteVolume(ctx, id); err != nil {
				klog.ErrorS(err, "Removing the volume file of a failed launch failed; the next start removes it", "volumeID", id)
			}
		}
		cancel()
	}
	var out Reservation
	err := s.mutate(func(now time.Time) error {
		// The reservations end first, so that a failed commit removes the files as orphans.
		s.releaseLaunch(plan)
		if ferr != nil {
			return fileError(failed, ferr)
		}
		for i, id := range plan.instanceIDs {
			s.recordLaunched(now, plan, i, id)
		}
		out = s.reservation(plan.reservationID)
		klog.InfoS("Instances launched", "reservationID", plan.reservationID, "instances", plan.instanceIDs, "image", plan.image.ID,
			"instanceType", plan.instanceType, "zone", plan.zone)
		return nil
	})
	return out, err
}

// recordLaunched records the i-th instance of a launch and its volumes.
func (s *State) recordLaunched(now time.Time, plan *launchPlan, i int, id string) {
	in := s.putInstance(InstanceSpec{ID: id, Zone: plan.zone, InstanceType: plan.instanceType})
	in.Tags = slices.Clone(plan.in.InstanceTags)
	in.Launch = &Launch{ImageID: plan.image.ID, ReservationID: plan.reservationID, LaunchIndex: int32(i)}
	if plan.in.ClientToken != "" {
		in.Launch.ClientToken, in.Launch.ParamsHash = plan.in.ClientToken, plan.in.hash()
	}
	s.setInstanceState(now, in, InstancePending, now.Add(s.cfg.Durations.InstanceStart))
	for _, d := range plan.devices[i] {
		v := d.vol
		v.State, v.CreateTime, v.Tags = VolumeInUse, now, slices.Clone(plan.in.VolumeTags)
		v.Attachments = []Attachment{{VolumeID: v.ID, InstanceID: id, Device: d.device, State: AttachAttaching, AttachTime: now,
			DueAt: now.Add(s.cfg.Durations.Attach), DeleteOnTermination: d.deleteOnTermination}}
		s.volumes[v.ID] = v
		s.volumeIDs.insert(v.ID)
		s.markDirty(kindVolume, v.ID)
		s.markPending(kindVolume, v.ID)
	}
}

// releaseLaunch ends a plan's reservations and wakes the requests waiting on its ClientToken.
func (s *State) releaseLaunch(plan *launchPlan) {
	for i, id := range plan.instanceIDs {
		delete(s.reserved, id)
		if i < len(plan.devices) {
			for _, d := range plan.devices[i] {
				delete(s.reserved, d.vol.ID)
			}
		}
	}
	if w, ok := s.launches[plan.in.ClientToken]; ok && plan.in.ClientToken != "" {
		close(w)
		delete(s.launches, plan.in.ClientToken)
	}
}

// launchOfToken finds the launch a ClientToken made, while any of its instances is known.
func (s *State) launchOfToken(token string) *Launch {
	for _, id := range s.instanceIDs.ids {
		if l := s.instances[id].Launch; l != nil && l.ClientToken == token {
			return l
		}
	}
	return nil
}

// reservation lists a launch's instances still known, in launch order.
func (s *State) reservation(id string) Reservation {
	byInstance := s.attachmentsByInstance()
	out := Reservation{ID: id}
	for _, iid := range s.instanceIDs.ids {
		if l := s.instances[iid].Launch; l != nil && l.ReservationID == id {
			out.Instances = append(out.Instances, *s.viewOf(iid, byInstance))
		}
	}
	slices.SortFunc(out.Instances, func(a, b InstanceView) int { return int(a.Launch.LaunchIndex - b.Launch.LaunchIndex) })
	return out
}
