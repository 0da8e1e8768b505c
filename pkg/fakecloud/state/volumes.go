package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// CreateVolumeInput is CreateVolume's request.
type CreateVolumeInput struct {
	SizeGiB    *int32
	VolumeType string
	Iops       *int32
	Throughput *int32
	Encrypted  bool
	KmsKeyID   string
	SnapshotID string
	// InitRate is VolumeInitializationRate (MiB/s), only with SnapshotID. Left out of the ClientToken's
	// fingerprint when absent, so tokens recorded before it existed still match.
	InitRate *int32 `json:",omitempty"`
	// SourceVolumeID makes the volume a copy of another (CopyVolumes): same zone, its bytes, its size or more.
	SourceVolumeID string
	Zone           string
	ZoneID         string
	MultiAttach    bool
	Tags           []Tag
	ClientToken    string
	DryRun         bool
}

// hash fingerprints the parameters a ClientToken binds, so a retry can be told from a different request.
func (in CreateVolumeInput) hash() string {
	in.ClientToken, in.DryRun = "", false
	raw, _ := json.Marshal(in)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// maxClientToken is EC2's limit on ClientToken length.
const maxClientToken = 64

// errKmsWithoutEncrypted refuses a KMS key named for a resource not asked to be encrypted.
var errKmsWithoutEncrypted = ec2err.New(ec2err.CodeInvalidParameterDependency, "The parameter KmsKeyId requires the parameter Encrypted to be set.")

// maxKmsKeyID bounds a KMS key's ID, alias or ARN, as KMS does.
const maxKmsKeyID = 2048

// CreateVolume validates the request, makes the volume's file outside the state lock (a restore copies a whole
// snapshot), then records the volume in state creating. The reply is sent only once the record is committed.
func (s *State) CreateVolume(in CreateVolumeInput) (Volume, error) {
	plan := func(now time.Time) (Volume, *Volume, chan struct{}, error) {
		v, w, err := s.planVolume(in, now)
		if err == nil && w == nil && v.State != "" {
			return v.view(), nil, nil, nil
		}
		return Volume{}, v, w, err
	}
	release := func(v *Volume) { s.release(v, in.ClientToken) }
	return createOnce(s, plan, release, func(v *Volume) (Volume, error) { return s.makeVolume(v, in) })
}

// planVolume checks the request and reserves an ID. It returns an existing volume for a replayed ClientToken
// (in state deleted when the token's volume is gone: tokens.go), or a channel to wait on when a request with
// the same token is in flight.
func (s *State) planVolume(in CreateVolumeInput, now time.Time) (*Volume, chan struct{}, error) {
	var zone string
	var err error
	if in.SourceVolumeID == "" {
		if zone, err = s.resolveZone(in.Zone, in.ZoneID); err != nil {
			return nil, nil, err
		}
	}
	if len(in.ClientToken) > maxClientToken {
		return nil, nil, ec2err.InvalidValue("clientToken", in.ClientToken, "The client token must be at most 64 characters.")
	}
	if in.ClientToken != "" {
		if w, ok := s.tokensInFlight[in.ClientToken]; ok {
			return nil, w, nil
		}
		v, ok := s.volumes[s.tokens[in.ClientToken]]
		if tb, buried := s.tombstone(in.ClientToken, now); !ok && buried {
			v, ok = &tb.Volume, true
		}
		if ok {
			if v.ParamsHash != in.hash() {
				return nil, nil, ec2err.New(ec2err.CodeIdempotentParameterMismatch,
					"The client token '%s' was used with different parameters for volume '%s'.", in.ClientToken, v.ID)
			}
			if in.DryRun {
				return nil, nil, ec2err.DryRun()
			}
			return v, nil, nil
		}
	}
	v, err := s.shapeVolume(in, zone)
	if err != nil {
		return nil, nil, err
	}
	if in.DryRun {
		return nil, nil, ec2err.DryRun()
	}
	v.ID = s.reserveVolumeID()
	if v.SourceVolumeID != "" {
		// The copy holds the source's transitions (a delete waits) until its file is made.
		s.copying[v.SourceVolumeID]++
	}
	if in.ClientToken != "" {
		s.tokensInFlight[in.ClientToken] = make(chan struct{})
	}
	return v, nil, nil
}

// shapeVolume checks what a new volume is asked to be (its source, size, type, performance, encryption and tags)
// and returns it without an ID: CreateVolume's and CopyVolumes' volume, or one of RunInstances' block devices.
func (s *State) shapeVolume(in CreateVolumeInput, zone string) (*Volume, error) {
	v := &Volume{Zone: zone, Type: in.VolumeType, Encrypted: in.Encrypted, KmsKeyID: in.KmsKeyID, MultiAttach: in.MultiAttach}
	if v.Type == "" {
		v.Type = "gp2"
	}
	if err := s.applySource(v, in); err != nil {
		return nil, err
	}
	if err := s.applyInitRate(v, in); err != nil {
		return nil, err
	}
	if err := checkKmsKeyID(in.KmsKeyID); err != nil {
		return nil, err
	}
	if in.KmsKeyID != "" && !v.Encrypted && !s.ebs.EncryptionByDefault {
		return nil, errKmsWithoutEncrypted
	}
	// Encrypted with the key asked, the source's, or the account's default; always, with encryption by default.
	v.Encrypted, v.KmsKeyID = s.encryption(v.Encrypted, in.KmsKeyID, v.Encrypted, v.KmsKeyID)
	var err error
	v.Iops, v.Throughput, err = volumeSpec{Type: v.Type, SizeGiB: v.SizeGiB, Iops: in.Iops, Throughput: in.Throughput, MultiAttach: in.MultiAttach}.settle()
	if err != nil {
		return nil, err
	}
	if err := validateTags(in.Tags); err != nil {
		return nil, err
	}
	return v, nil
}

// reserveVolumeID picks a new volume ID and holds it while the volume's file is made without the lock.
func (s *State) reserveVolumeID() string {
	id := s.uniqueID("vol", func(id string) bool { _, ok := s.volumes[id]; _, r := s.reserved[id]; return ok || r })
	s.reserved[id] = struct{}{}
	return id
}

// createFile makes a planned volume's file: empty, a snapshot restored, or a volume copied. It runs without the
// state lock.
func (s *State) createFile(v *Volume) error {
	ctx, cancel := ioCtx()
	defer cancel()
	switch {
	case v.SnapshotID != "":
		return s.backend.RestoreVolume(ctx, v.ID, v.SnapshotID, gib(v.SizeGiB))
	case v.SourceVolumeID != "":
		return s.backend.CopyVolume(ctx, v.ID, v.SourceVolumeID, gib(v.SizeGiB))
	}
	return s.backend.CreateVolume(ctx, v.ID, gib(v.SizeGiB))
}

// fileError answers a volume file that could not be made: its source gone meanwhile, or the data directory's
// failure.
func fileError(v *Volume, err error) error {
	klog.ErrorS(err, "Creating volume file failed", "volumeID", v.ID)
	switch {
	case errors.Is(err, blockdev.ErrNotFound) && v.SourceVolumeID != "":
		return notFound(ec2err.CodeInvalidVolumeNotFound, "volume", []string{v.SourceVolumeID})
	case errors.Is(err, blockdev.ErrNotFound):
		return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{v.SnapshotID})
	}
	return storageError(err, v.SizeGiB)
}

// makeVolume creates the planned volume's file without the state lock, then records the volume.
func (s *State) makeVolume(v *Volume, in CreateVolumeInput) (Volume, error) {
	err := s.createFile(v)
	var out Volume
	merr := s.mutate(func(now time.Time) error {
		// The reservation ends first, so that a failed commit removes the file as an orphan.
		s.release(v, in.ClientToken)
		if err != nil {
			return fileError(v, err)
		}
		v.State, v.CreateTime, v.DueAt = VolumeCreating, now, now.Add(s.cfg.Durations.VolumeCreate)
		v.Tags = slices.Clone(in.Tags)
		if in.ClientToken != "" {
			v.ClientToken, v.ParamsHash = in.ClientToken, in.hash()
			s.tokens[in.ClientToken] = v.ID
			// An expired tombstone of the token, not yet swept, goes with the token's new use.
			s.tombstones.forget(s, in.ClientToken)
		}
		s.volumes[v.ID] = v
		s.volumeIDs.insert(v.ID)
		s.markDirty(kindVolume, v.ID)
		s.markPending(kindVolume, v.ID)
		out = v.view()
		klog.V(2).InfoS("Volume created", "volumeID", v.ID, "zone", v.Zone, "type", v.Type, "sizeGiB", v.SizeGiB,
			"snapshotID", v.SnapshotID, "sourceVolumeID", v.SourceVolumeID)
		return nil
	})
	return out, merr
}

// storageError answers a failed write to the data directory (a volume or snapshot file made or grown, or the
// state store's commit): a full filesystem, or a size past its largest file (sizeGiB, when a volume's size is
// the cause), is EC2's capacity error naming the cause; anything else an internal error.
func storageError(err error, sizeGiB int32) error {
	switch {
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return ec2err.New(ec2err.CodeInsufficientVolumeCapacity,
			"There is not enough capacity to fulfill your EBS volume provision request: the data directory's filesystem is full (%v).", unix.ENOSPC)
	case errors.Is(err, unix.EFBIG) && sizeGiB > 0:
		return ec2err.New(ec2err.CodeInsufficientVolumeCapacity,
			"There is not enough capacity to fulfill your EBS volume provision request: a volume of %d GiB exceeds the largest file the data directory's filesystem can hold (%v).", sizeGiB, unix.EFBIG)
	case errors.Is(err, unix.EFBIG):
		return ec2err.New(ec2err.CodeInsufficientVolumeCapacity,
			"There is not enough capacity to fulfill your EBS volume provision request: a file exceeds the largest the data directory's filesystem can hold (%v).", unix.EFBIG)
	}
	return internal(err)
}

// release ends a planned volume's reservation and its hold on the volume it copies.
func (s *State) release(v *Volume, token string) {
	s.unreserve(v.ID, token)
	if v.SourceVolumeID != "" {
		s.endCopyOf(v.SourceVolumeID)
	}
}

// applySource sets the size (and encryption) from the request and the snapshot it restores or the volume it
// copies, if any.
func (s *State) applySource(v *Volume, in CreateVolumeInput) error {
	if in.SourceVolumeID != "" {
		return s.applySourceVolume(v, in)
	}
	if in.SnapshotID == "" {
		if in.SizeGiB == nil {
			// EC2 names the two parameters of which one is needed so.
			return ec2err.Missing("size/snapshot")
		}
		v.SizeGiB = *in.SizeGiB
		return nil
	}
	sn, ok := s.snapshots[in.SnapshotID]
	if !ok {
		return notFound(ec2err.CodeInvalidSnapshotNotFound, "snapshot", []string{in.SnapshotID})
	}
	if sn.State != SnapshotCompleted {
		return ec2err.New(ec2err.CodeIncorrectState, "Snapshot '%s' is in state '%s'; a volume can only be created from a completed snapshot.", sn.ID, sn.State)
	}
	if sn.archived(s.clock.Now()) {
		return errArchived(sn.ID)
	}
	v.SnapshotID = sn.ID
	return inherit(v, in.SizeGiB, sourceOf{sn.VolumeSize, sn.Encrypted, sn.KmsKeyID},
		"Volume of size %dGiB is smaller than snapshot '%s', expect size >= %dGiB", sn.ID)
}

// sourceOf is what a new volume takes from the snapshot it restores or the volume it copies.
type sourceOf struct {
	sizeGiB   int32
	encrypted bool
	kmsKeyID  string
}

// inherit gives v its source's size unless a larger one is asked (tooSmall, with the size asked, the source's ID
// and its size, refuses a smaller one), and its source's encryption.
func inherit(v *Volume, sizeGiB *int32, src sourceOf, tooSmall, srcID string) error {
	v.SizeGiB, v.SourceGiB = src.sizeGiB, src.sizeGiB
	if sizeGiB != nil {
		if *sizeGiB < src.sizeGiB {
			return ec2err.New(ec2err.CodeInvalidParameterValue, tooSmall, *sizeGiB, srcID, src.sizeGiB)
		}
		v.SizeGiB = *sizeGiB
	}
	if src.encrypted {
		v.Encrypted = true
		if v.KmsKeyID == "" {
			v.KmsKeyID = src.kmsKeyID
		}
	}
	return nil
}

// applySourceVolume: a copy lives in its source's zone, has at least its size and inherits its encryption. The
// source may be attached (the copy is crash-consistent), but not creating or deleting.
func (s *State) applySourceVolume(v *Volume, in CreateVolumeInput) error {
	src, err := s.settledVolume(in.SourceVolumeID)
	if err != nil {
		return err
	}
	v.SourceVolumeID, v.Zone = src.ID, src.Zone
	return inherit(v, in.SizeGiB, sourceOf{src.SizeGiB, src.Encrypted, src.KmsKeyID},
		"The size of the volume copy (%dGiB) must be at least the size of the source volume '%s' (%dGiB).", src.ID)
}

func (s *State) resolveZone(name, id string) (string, error) {
	switch {
	case name != "" && id != "":
		return "", ec2err.New(ec2err.CodeInvalidParameterCombination, "The parameter AvailabilityZone cannot be used with the parameter AvailabilityZoneId")
	case name != "":
		if z, ok := s.cfg.zone(name); ok {
			return z.Name, nil
		}
		return "", ec2err.New(ec2err.CodeInvalidZoneNotFound, "The zone '%s' does not exist.", name)
	case id != "":
		if z, ok := s.cfg.zoneByID(id); ok {
			return z.Name, nil
		}
		return "", ec2err.New(ec2err.CodeInvalidZoneNotFound, "The zone ID '%s' does not exist.", id)
	}
	return "", ec2err.Missing("AvailabilityZone")
}

func (s *State) uniqueID(prefix string, taken func(string) bool) string {
	for {
		if id := newID(prefix); !taken(id) {
			return id
		}
	}
}

// DeleteVolume starts deleting an available volume.
func (s *State) DeleteVolume(id string, dryRun bool) error {
	return s.mutate(func(now time.Time) error {
		v, err := s.volume(id)
		if err != nil {
			return err
		}
		switch {
		case len(v.Attachments) > 0:
			return ec2err.New(ec2err.CodeVolumeInUse, "Volume %s is currently attached to %s", id, v.Attachments[0].InstanceID)
		case v.State == VolumeDeleting:
			if dryRun {
				return ec2err.DryRun()
			}
			return nil
		case v.State != VolumeAvailable && v.State != VolumeError:
			return ec2err.New(ec2err.CodeIncorrectState, "The volume '%s' is '%s'", id, v.State)
		}
		if dryRun {
			return ec2err.DryRun()
		}
		v.State, v.DueAt = VolumeDeleting, now.Add(s.cfg.Durations.VolumeDelete)
		s.markDirty(kindVolume, id)
		s.markPending(kindVolume, id)
		return nil
	})
}

// volume finds a volume by ID, with EC2's errors for malformed and unknown IDs.
func (s *State) volume(id string) (*Volume, error) {
	if err := checkID("vol", ec2err.CodeInvalidVolumeIDMalformed, id); err != nil {
		return nil, err
	}
	v, ok := s.volumes[id]
	if !ok {
		return nil, notFound(ec2err.CodeInvalidVolumeNotFound, "volume", []string{id})
	}
	return v, nil
}

// settledVolume finds a volume that is available or in use: neither still creating nor being deleted.
func (s *State) settledVolume(id string) (*Volume, error) {
	v, err := s.volume(id)
	if err != nil {
		return nil, err
	}
	if v.State != VolumeAvailable && v.State != VolumeInUse {
		return nil, ec2err.New(ec2err.CodeIncorrectState, "The volume '%s' is '%s'", v.ID, v.State)
	}
	return v, nil
}

func checkID(prefix, code, id string) error {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	if !ok || rest == "" {
		return ec2err.New(code, "Invalid id: \"%s\" (expecting \"%s-...\")", id, prefix)
	}
	return nil
}

// DescribeInput is a Describe* request: IDs, filters and a page.
type DescribeInput struct {
	IDs     []string
	Filters []Filter
	Page    Page
}

var volumeFields = fields[Volume]{
	"volume-id":            func(v *Volume) []string { return []string{v.ID} },
	"status":               func(v *Volume) []string { return []string{v.State} },
	"availability-zone":    func(v *Volume) []string { return []string{v.Zone} },
	"volume-type":          func(v *Volume) []string { return []string{v.Type} },
	"size":                 func(v *Volume) []string { return []string{strconv.Itoa(int(v.SizeGiB))} },
	"snapshot-id":          func(v *Volume) []string { return []string{v.SnapshotID} },
	"encrypted":            func(v *Volume) []string { return []string{strconv.FormatBool(v.Encrypted)} },
	"multi-attach-enabled": func(v *Volume) []string { return []string{strconv.FormatBool(v.MultiAttach)} },
	"fast-restored":        func(v *Volume) []string { return []string{strconv.FormatBool(v.FastRestored)} },
	"create-time":          func(v *Volume) []string { return timeValues(v.CreateTime) },
	// No service manages a fakecloud volume for its owner (EC2's managed resources): none has an operator.
	"operator.managed":   func(*Volume) []string { return []string{"false"} },
	"operator.principal": noValues[Volume],
	"attachment.instance-id": func(v *Volume) []string {
		return attachmentValues(v, func(a Attachment) string { return a.InstanceID })
	},
	"attachment.attach-time": func(v *Volume) []string {
		var out []string
		for _, a := range v.Attachments {
			out = append(out, timeValues(a.AttachTime)...)
		}
		return out
	},
	"attachment.status": func(v *Volume) []string { return attachmentValues(v, func(a Attachment) string { return a.State }) },
	"attachment.device": func(v *Volume) []string { return attachmentValues(v, func(a Attachment) string { return a.Device }) },
	"attachment.delete-on-termination": func(v *Volume) []string {
		return attachmentValues(v, func(a Attachment) string { return strconv.FormatBool(a.DeleteOnTermination) })
	},
}

func attachmentValues(v *Volume, get func(Attachment) string) []string {
	out := make([]string, 0, len(v.Attachments))
	for _, a := range v.Attachments {
		out = append(out, get(a))
	}
	return out
}

// DescribeVolumes lists volumes by ID or by filter, a page at a time.
func (s *State) DescribeVolumes(in DescribeInput) ([]Volume, string, error) {
	var (
		out  []Volume
		next string
		err  error
	)
	s.read(func(time.Time) {
		var match func(*Volume) bool
		byName := withField(volumeFields, "availability-zone-id", func(v *Volume) []string { return s.zoneIDs(v.Zone) })
		if match, err = byName.compile(in.Filters, func(v *Volume) []Tag { return v.Tags }); err != nil {
			return
		}
		var ids []string
		if len(in.IDs) > 0 {
			ids, err = s.knownIDs(in.IDs, "vol", ec2err.CodeInvalidVolumeIDMalformed, ec2err.CodeInvalidVolumeNotFound, "volume",
				func(id string) bool { _, ok := s.volumes[id]; return ok })
			if err != nil {
				return
			}
			if _, err = volumePages.pageSize(in.Page, true); err != nil {
				return
			}
			for _, id := range ids {
				if v := s.volumes[id]; match(v) {
					out = append(out, v.view())
				}
			}
			return
		}
		ids, next, err = volumePages.page(&s.volumeIDs, in.Page, false, func(id string) bool { return match(s.volumes[id]) })
		for _, id := range ids {
			out = append(out, s.volumes[id].view())
		}
	})
	return out, next, err
}

// knownIDs checks requested IDs, naming every unknown one in a single NotFound as EC2 does.
func (s *State) knownIDs(ids []string, prefix, malformed, code, noun string, exists func(string) bool) ([]string, error) {
	var missing []string
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if err := checkID(prefix, malformed, id); err != nil {
			return nil, err
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		if !exists(id) {
			missing = append(missing, id)
			continue
		}
		out = append(out, id)
	}
	if len(missing) > 0 {
		return nil, notFound(code, noun, missing)
	}
	return out, nil
}

func (v *Volume) view() Volume {
	c := *v
	c.Tags = slices.Clone(v.Tags)
	c.Attachments = slices.Clone(v.Attachments)
	c.ModHistory = nil
	return c
}
