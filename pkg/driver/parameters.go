package driver

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/tagspec"
)

// StorageClass (CreateVolume) parameter keys. The driver's own keys match case-insensitively, as the EBS
// driver's do; the csi.storage.k8s.io ones are set by sidecars and match exactly.
const (
	ParamType      = "type"
	ParamIOPS      = "iops"
	ParamIOPSPerGB = "iopspergb"
	// ParamBlockAttachUntilInitialized holds the attach of a disk still initializing from its snapshot or
	// source until it is done, so that its first pod starts at full speed.
	ParamBlockAttachUntilInitialized = "blockattachuntilinitialized"
	// ParamAllowAutoIOPSPerGBIncrease raises iopsPerGB × size to the type's minimum instead of refusing it.
	ParamAllowAutoIOPSPerGBIncrease = "allowautoiopspergbincrease"
	ParamThroughput                 = "throughput"
	ParamEncrypted                  = "encrypted"
	ParamKMSKeyID                   = "kmskeyid"
	ParamTagSpecPrefix              = "tagspecification_"
	// ParamTagDeletionPrefix (VolumeAttributesClass only): tagDeletion_N = "key" removes a tag.
	ParamTagDeletionPrefix = "tagdeletion_"
	ParamBlockSize         = "blocksize"
	ParamInodeSize         = "inodesize"
	ParamBytesPerInode     = "bytesperinode"
	ParamNumberOfInodes    = "numberofinodes"
	// ParamExt4BigAlloc ("true"/"false") and ParamExt4ClusterSize (bytes, needs bigalloc) are the EBS driver's
	// clustered allocation for ext4.
	ParamExt4BigAlloc    = "ext4bigalloc"
	ParamExt4ClusterSize = "ext4clustersize"
	// ParamVolumeInitializationRate is EBS's Provisioned Rate for Volume Initialization, MiB/s, applied to
	// volumes restored from a snapshot.
	ParamVolumeInitializationRate = "volumeinitializationrate"

	ParamFSType       = "csi.storage.k8s.io/fstype"
	ParamPVCName      = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	ParamPVName       = "csi.storage.k8s.io/pv/name"

	// Snapshot parameters from the snapshotter's --extra-create-metadata.
	ParamSnapshotName        = "csi.storage.k8s.io/volumesnapshot/name"
	ParamSnapshotNamespace   = "csi.storage.k8s.io/volumesnapshot/namespace"
	ParamSnapshotContentName = "csi.storage.k8s.io/volumesnapshotcontent/name"
	// Group snapshot parameters from the snapshotter's --extra-create-metadata.
	ParamGroupSnapshotName        = "csi.storage.k8s.io/volumegroupsnapshot/name"
	ParamGroupSnapshotNamespace   = "csi.storage.k8s.io/volumegroupsnapshot/namespace"
	ParamGroupSnapshotContentName = "csi.storage.k8s.io/volumegroupsnapshotcontent/name"

	// ParamFastSnapshotRestoreZones (VolumeSnapshotClass): comma-separated zones to turn fast snapshot restore
	// on in for each new snapshot.
	ParamFastSnapshotRestoreZones = "fastsnapshotrestoreavailabilityzones"

	// ParamMultiInstance (VolumeGroupSnapshotClass, "multiInstance"): a bool; when true a group whose volumes
	// are on several instances, or detached, is taken one instance at a time instead of refused.
	ParamMultiInstance = "multiinstance"
)

// EBS's bounds on the volume initialization rate, MiB/s.
const (
	minInitializationRate = 100
	maxInitializationRate = 300
)

// volumeParams are CreateVolume's parameters, parsed and checked.
type volumeParams struct {
	disk      cloud.DiskOptions
	iopsPerGB int32
	// allowIOPSIncrease is allowAutoIOPSPerGBIncrease.
	allowIOPSIncrease bool
	// blockAttach is blockAttachUntilInitialized.
	blockAttach bool
	fsType      string
	// format holds the format options for the volume context, keyed as keys.go names them.
	format map[string]string
	// tagSpecs are the tagSpecification_N values, in key order, rendered once every parameter is read.
	tagSpecs []tagParam
	// names are the claim's and volume's, from the provisioner's --extra-create-metadata.
	names tagspec.Data
}

// setClaimName records the claim or volume name a sidecar passes as key (its --extra-create-metadata or
// --extra-modify-metadata), reporting whether key is one of them.
func setClaimName(names *tagspec.Data, key, value string) bool {
	switch key {
	case ParamPVCName:
		names.PVCName = value
	case ParamPVCNamespace:
		names.PVCNamespace = value
	case ParamPVName:
		names.PVName = value
	default:
		return false
	}
	return true
}

// tagParam is one tagSpecification_N parameter: its key, for errors, and its "key=value" value.
type tagParam struct{ param, spec string }

func boolParam(key, value string) (bool, error) {
	b, err := strconv.ParseBool(value)
	if err != nil {
		return false, invalidParam("parameter %q must be true or false, not %q", key, value)
	}
	return b, nil
}

func invalidParam(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalidParameter, fmt.Sprintf(format, args...))
}

// parseVolumeParams reads StorageClass parameters and VolumeAttributesClass (mutable) parameters. Unknown keys
// are refused by name: a typo in a StorageClass must not silently give a different disk.
func parseVolumeParams(params, mutable map[string]string) (volumeParams, error) {
	p := volumeParams{format: map[string]string{}}
	// Sorted so that the first error is the same on every call.
	for _, key := range slices.Sorted(maps.Keys(params)) {
		if err := p.set(key, params[key]); err != nil {
			return volumeParams{}, err
		}
	}
	m, err := parseMutableParams(mutable)
	if err != nil {
		return volumeParams{}, err
	}
	mod := m.modify
	if mod.VolumeType != "" {
		p.disk.VolumeType = mod.VolumeType
	}
	if mod.IOPS != 0 {
		p.disk.IOPS = mod.IOPS
	}
	if mod.Throughput != 0 {
		p.disk.Throughput = mod.Throughput
	}
	// The class's tags, then the VolumeAttributesClass's over them, less the ones it deletes; the names come
	// from the provisioner's --extra-create-metadata.
	p.disk.PVCName, p.disk.PVCNamespace, p.disk.PVName = p.names.PVCName, p.names.PVCNamespace, p.names.PVName
	if p.disk.Tags, err = renderTags(slices.Concat(p.tagSpecs, m.tagSpecs), p.names); err != nil {
		return volumeParams{}, err
	}
	for _, k := range m.tagDeletions {
		delete(p.disk.Tags, k)
	}
	if p.disk.VolumeType == "" {
		p.disk.VolumeType = DefaultVolumeType
	}
	if p.iopsPerGB != 0 && p.disk.IOPS != 0 {
		return volumeParams{}, invalidParam("parameters %q and %q cannot be used together", ParamIOPS, ParamIOPSPerGB)
	}
	if p.disk.KMSKeyID != "" && !p.disk.Encrypted {
		return volumeParams{}, invalidParam("parameter %q needs %q set to true", ParamKMSKeyID, ParamEncrypted)
	}
	if err := checkFormatOptions(p.fsType, p.format); err != nil {
		return volumeParams{}, err
	}
	return p, nil
}

func (p *volumeParams) set(key, value string) error {
	lower := strings.ToLower(key)
	var err error
	switch {
	case lower == ParamType:
		p.disk.VolumeType = value
	case lower == ParamIOPS:
		p.disk.IOPS, err = positiveInt32(key, value)
	case lower == ParamIOPSPerGB:
		p.iopsPerGB, err = positiveInt32(key, value)
	case lower == ParamThroughput:
		p.disk.Throughput, err = positiveInt32(key, value)
	case lower == ParamAllowAutoIOPSPerGBIncrease:
		p.allowIOPSIncrease, err = boolParam(key, value)
	case lower == ParamBlockAttachUntilInitialized:
		p.blockAttach, err = boolParam(key, value)
	case lower == ParamEncrypted:
		p.disk.Encrypted, err = boolParam(key, value)
	case lower == ParamKMSKeyID:
		p.disk.KMSKeyID = value
	case lower == ParamVolumeInitializationRate:
		p.disk.InitializationRate, err = positiveInt32(key, value)
		if err == nil && (p.disk.InitializationRate < minInitializationRate || p.disk.InitializationRate > maxInitializationRate) {
			err = invalidParam("parameter %q must be between %d and %d (MiB/s), not %d", key, minInitializationRate, maxInitializationRate,
				p.disk.InitializationRate)
		}
	case strings.HasPrefix(lower, ParamTagSpecPrefix):
		p.tagSpecs = append(p.tagSpecs, tagParam{key, value})
	case formatContextKeys[lower] != "":
		err = p.setFormat(lower, key, value)
	case key == ParamFSType:
		p.fsType = strings.ToLower(value)
		if !supportedFS(p.fsType) {
			err = invalidParam("parameter %q: filesystem %q is not supported (%s)", key, value, fsTypes)
		}
	case setClaimName(&p.names, key, value):
	default:
		err = invalidParam("unknown parameter %q", key)
	}
	return err
}

var formatContextKeys = map[string]string{
	ParamBlockSize:       ContextBlockSize,
	ParamInodeSize:       ContextInodeSize,
	ParamBytesPerInode:   ContextBytesPerInode,
	ParamNumberOfInodes:  ContextNumberOfInodes,
	ParamExt4BigAlloc:    ContextExt4BigAlloc,
	ParamExt4ClusterSize: ContextExt4ClusterSize,
}

// formatKeys are the volume context's format options, in the order their mkfs arguments take: a fixed order
// keeps the mkfs command line the same between retries.
var formatKeys = []string{ContextBlockSize, ContextInodeSize, ContextBytesPerInode, ContextNumberOfInodes,
	ContextExt4BigAlloc, ContextExt4ClusterSize}

func (p *volumeParams) setFormat(lower, key, value string) error {
	ctxKey := formatContextKeys[lower]
	v, err := formatValue(ctxKey, key, value)
	if err != nil {
		return err
	}
	if v != "" {
		p.format[ctxKey] = v
	}
	return nil
}

// formatValue checks one format option (named key in errors) as mkfs takes it: a positive integer, a power of
// two for block, inode and cluster sizes; ext4BigAlloc is true or false, and "" (nothing to pass) when false.
// The controller checks StorageClass values with it, the node the volume context it is handed, which a
// statically provisioned volume may carry unchecked.
func formatValue(ctxKey, key, value string) (string, error) {
	if ctxKey == ContextExt4BigAlloc {
		on, err := boolParam(key, value)
		if err != nil || !on {
			return "", err
		}
		return "true", nil
	}
	n, err := positiveInt32(key, value)
	if err != nil {
		return "", err
	}
	if (ctxKey == ContextBlockSize || ctxKey == ContextInodeSize || ctxKey == ContextExt4ClusterSize) && n&(n-1) != 0 {
		return "", invalidParam("parameter %q must be a power of two, not %d", key, n)
	}
	return strconv.Itoa(int(n)), nil
}

// formatOptionsRefused are the format options each filesystem's mkfs has no equivalent for, as the EBS driver
// refuses them: mkfs.xfs sets no inode ratio or count, and only ext4 has clustered allocation.
var formatOptionsRefused = map[string][]string{
	FSExt3: {ContextExt4BigAlloc, ContextExt4ClusterSize},
	FSXFS:  {ContextBytesPerInode, ContextNumberOfInodes, ContextExt4BigAlloc, ContextExt4ClusterSize},
}

// checkFormatOptions refuses options the chosen filesystem's mkfs has no equivalent for ("": not known yet,
// only what holds for every filesystem is checked), and a cluster size without bigalloc.
func checkFormatOptions(fsType string, format map[string]string) error {
	if _, ok := format[ContextExt4ClusterSize]; ok && format[ContextExt4BigAlloc] != "true" {
		return invalidParam("format option %q needs %q set to true", ContextExt4ClusterSize, ContextExt4BigAlloc)
	}
	for _, k := range formatOptionsRefused[fsType] {
		if _, ok := format[k]; ok {
			return invalidParam("format option %q does not apply to %s", k, fsType)
		}
	}
	return nil
}

// renderTags renders tagSpecification_N values ("key=value", the value a template over names: package
// tagspec) into tags, later ones winning; nil when there are none. The driver's own keys are refused.
func renderTags(specs []tagParam, names tagspec.Data) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	tags := map[string]string{}
	for _, spec := range specs {
		k, v, err := tagspec.Render(spec.spec, names)
		if err != nil {
			return nil, fmt.Errorf("%w: parameter %q: %w", errInvalidParameter, spec.param, err)
		}
		if cloud.ReservedTag(k) {
			return nil, invalidParam("parameter %q: tag %q is set by the driver itself", spec.param, k)
		}
		tags[k] = v
	}
	return tags, nil
}

func positiveInt32(key, value string) (int32, error) {
	n, err := strconv.ParseInt(value, 10, 32)
	if err != nil || n <= 0 {
		return 0, invalidParam("parameter %q must be a positive integer, not %q", key, value)
	}
	return int32(n), nil
}

// mutableParams are a VolumeAttributesClass's parameters.
type mutableParams struct {
	modify cloud.ModifyOptions
	// tagSpecs are the tagSpecification_N values in key order, tagDeletions the tagDeletion_N keys.
	tagSpecs     []tagParam
	tagDeletions []string
	// names are the claim's and volume's, from the resizer's --extra-modify-metadata.
	names tagspec.Data
}

// tags renders the tags to set.
func (m mutableParams) tags() (map[string]string, error) { return renderTags(m.tagSpecs, m.names) }

// parseMutableParams reads VolumeAttributesClass parameters: type, iops, throughput, tags to set
// (tagSpecification_N) and to remove (tagDeletion_N), and the names the resizer adds.
func parseMutableParams(params map[string]string) (mutableParams, error) {
	var m mutableParams
	for _, key := range slices.Sorted(maps.Keys(params)) {
		value := params[key]
		var err error
		switch lower := strings.ToLower(key); {
		case lower == ParamType:
			m.modify.VolumeType = value
		case lower == ParamIOPS:
			m.modify.IOPS, err = positiveInt32(key, value)
		case lower == ParamThroughput:
			m.modify.Throughput, err = positiveInt32(key, value)
		case strings.HasPrefix(lower, ParamTagSpecPrefix):
			m.tagSpecs = append(m.tagSpecs, tagParam{key, value})
		case strings.HasPrefix(lower, ParamTagDeletionPrefix):
			k := strings.TrimSpace(value)
			if err = tagspec.Check(k, ""); err != nil {
				err = fmt.Errorf("%w: parameter %q: %w", errInvalidParameter, key, err)
			} else if cloud.ReservedTag(k) {
				err = invalidParam("parameter %q: tag %q is set by the driver itself", key, k)
			}
			m.tagDeletions = append(m.tagDeletions, k)
		case setClaimName(&m.names, key, value):
		default:
			err = invalidParam("unknown mutable parameter %q (type, iops, throughput, tagSpecification_N and tagDeletion_N can change)", key)
		}
		if err != nil {
			return mutableParams{}, err
		}
	}
	return m, nil
}

// snapshotParams are CreateSnapshot's parameters, parsed and checked.
type snapshotParams struct {
	opts cloud.SnapshotOptions
	// fastRestoreZones are the zones to turn fast snapshot restore on in, in the order given, without repeats.
	fastRestoreZones []string
	// multiInstance is a group class's ParamMultiInstance.
	multiInstance bool
}

// parseSnapshotParams reads VolumeSnapshotClass parameters: tags, whose values may name the snapshot's objects
// (package tagspec), plus the snapshotter's metadata, recorded as tags; and the fast snapshot restore zones.
func parseSnapshotParams(params map[string]string) (snapshotParams, error) {
	return parseSnapshotClass(params, false)
}

// parseGroupSnapshotParams reads VolumeGroupSnapshotClass parameters: tags (their values name no objects:
// tagspec knows none of a group) plus the snapshotter's group metadata, recorded as tags. Fast snapshot
// restores are not offered for groups. multiInstance opts in to groups spread over several instances.
func parseGroupSnapshotParams(params map[string]string) (cloud.SnapshotGroupOptions, error) {
	p, err := parseSnapshotClass(params, true)
	return cloud.SnapshotGroupOptions{SnapshotOptions: p.opts, MultiInstance: p.multiInstance}, err
}

// parseSnapshotClass reads the parameters of a snapshot class, or of a group snapshot class when group is set.
func parseSnapshotClass(params map[string]string, group bool) (snapshotParams, error) {
	var (
		p     snapshotParams
		specs []tagParam
		names tagspec.Data
		meta  = map[string]string{}
	)
	for _, key := range slices.Sorted(maps.Keys(params)) {
		value := params[key]
		switch {
		case !group && key == ParamSnapshotName:
			names.VolumeSnapshotName = value
		case !group && key == ParamSnapshotNamespace:
			names.VolumeSnapshotNamespace = value
		case !group && key == ParamSnapshotContentName:
			names.VolumeSnapshotContentName = value
		case group && (key == ParamGroupSnapshotName || key == ParamGroupSnapshotNamespace || key == ParamGroupSnapshotContentName):
		case group && key == "deletionPolicy":
			// The class's own field, which Kubernetes' e2e framework (v1.36) also copies into the parameters of
			// the classes it makes: nothing for the driver.
			continue
		default:
			lower := strings.ToLower(key)
			switch {
			case !group && lower == ParamFastSnapshotRestoreZones:
				zones, err := zoneList(key, value)
				if err != nil {
					return snapshotParams{}, err
				}
				p.fastRestoreZones = zones
			case group && lower == ParamMultiInstance:
				on, err := boolParam(key, value)
				if err != nil {
					return snapshotParams{}, err
				}
				p.multiInstance = on
			case strings.HasPrefix(lower, ParamTagSpecPrefix):
				specs = append(specs, tagParam{key, value})
			case group:
				return snapshotParams{}, invalidParam("unknown group snapshot parameter %q", key)
			default:
				return snapshotParams{}, invalidParam("unknown snapshot parameter %q", key)
			}
			continue
		}
		meta["kubernetes.io/created-for/"+strings.TrimPrefix(key, "csi.storage.k8s.io/")] = value
	}
	tags, err := renderTags(specs, names)
	if err != nil {
		return snapshotParams{}, err
	}
	if len(meta) > 0 && tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, meta)
	p.opts = cloud.SnapshotOptions{Tags: tags}
	return p, nil
}

// zoneList reads a comma-separated list of zones ("us-east-1a, us-east-1b"): spaces and repeats are dropped,
// an empty list or entry refused.
func zoneList(key, value string) ([]string, error) {
	var zones []string
	for _, z := range strings.Split(value, ",") {
		z = strings.TrimSpace(z)
		if z == "" {
			return nil, invalidParam("parameter %q: %q is not a comma-separated list of zones", key, value)
		}
		if !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	return zones, nil
}
