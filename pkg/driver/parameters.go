package driver

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// StorageClass (CreateVolume) parameter keys. The driver's own keys match case-insensitively, as the EBS
// driver's do; the csi.storage.k8s.io ones are set by sidecars and match exactly.
const (
	ParamType           = "type"
	ParamIOPS           = "iops"
	ParamIOPSPerGB      = "iopspergb"
	ParamThroughput     = "throughput"
	ParamEncrypted      = "encrypted"
	ParamKMSKeyID       = "kmskeyid"
	ParamTagSpecPrefix  = "tagspecification_"
	ParamBlockSize      = "blocksize"
	ParamInodeSize      = "inodesize"
	ParamBytesPerInode  = "bytesperinode"
	ParamNumberOfInodes = "numberofinodes"

	ParamFSType       = "csi.storage.k8s.io/fstype"
	ParamPVCName      = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	ParamPVName       = "csi.storage.k8s.io/pv/name"

	// Snapshot parameters from the snapshotter's --extra-create-metadata.
	ParamSnapshotName        = "csi.storage.k8s.io/volumesnapshot/name"
	ParamSnapshotNamespace   = "csi.storage.k8s.io/volumesnapshot/namespace"
	ParamSnapshotContentName = "csi.storage.k8s.io/volumesnapshotcontent/name"
)

// volumeParams are CreateVolume's parameters, parsed and checked.
type volumeParams struct {
	disk      cloud.DiskOptions
	iopsPerGB int32
	fsType    string
	// format holds the format options for the volume context, keyed as keys.go names them.
	format map[string]string
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
	mod, err := parseMutableParams(mutable)
	if err != nil {
		return volumeParams{}, err
	}
	if mod.VolumeType != "" {
		p.disk.VolumeType = mod.VolumeType
	}
	if mod.IOPS != 0 {
		p.disk.IOPS = mod.IOPS
	}
	if mod.Throughput != 0 {
		p.disk.Throughput = mod.Throughput
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
	case lower == ParamEncrypted:
		p.disk.Encrypted, err = strconv.ParseBool(value)
		if err != nil {
			err = invalidParam("parameter %q must be true or false, not %q", key, value)
		}
	case lower == ParamKMSKeyID:
		p.disk.KMSKeyID = value
	case strings.HasPrefix(lower, ParamTagSpecPrefix):
		err = addTag(&p.disk.Tags, key, value)
	case lower == ParamBlockSize, lower == ParamInodeSize, lower == ParamBytesPerInode, lower == ParamNumberOfInodes:
		err = p.setFormat(lower, key, value)
	case key == ParamFSType:
		p.fsType = strings.ToLower(value)
		if p.fsType != FSExt4 && p.fsType != FSXFS {
			err = invalidParam("parameter %q: filesystem %q is not supported (ext4, xfs)", key, value)
		}
	case key == ParamPVCName:
		p.disk.PVCName = value
	case key == ParamPVCNamespace:
		p.disk.PVCNamespace = value
	case key == ParamPVName:
		p.disk.PVName = value
	default:
		err = invalidParam("unknown parameter %q", key)
	}
	return err
}

var formatContextKeys = map[string]string{
	ParamBlockSize:      ContextBlockSize,
	ParamInodeSize:      ContextInodeSize,
	ParamBytesPerInode:  ContextBytesPerInode,
	ParamNumberOfInodes: ContextNumberOfInodes,
}

func (p *volumeParams) setFormat(lower, key, value string) error {
	ctxKey := formatContextKeys[lower]
	v, err := formatValue(ctxKey, key, value)
	if err != nil {
		return err
	}
	p.format[ctxKey] = v
	return nil
}

// formatValue checks one format option (named key in errors) as mkfs takes it: a positive integer, a power of
// two for block and inode sizes. The controller checks StorageClass values with it, the node the volume
// context it is handed, which a statically provisioned volume may carry unchecked.
func formatValue(ctxKey, key, value string) (string, error) {
	n, err := positiveInt32(key, value)
	if err != nil {
		return "", err
	}
	if (ctxKey == ContextBlockSize || ctxKey == ContextInodeSize) && n&(n-1) != 0 {
		return "", invalidParam("parameter %q must be a power of two, not %d", key, n)
	}
	return strconv.Itoa(int(n)), nil
}

// checkFormatOptions refuses options the chosen filesystem's mkfs has no equivalent for.
func checkFormatOptions(fsType string, format map[string]string) error {
	if fsType != FSXFS {
		return nil
	}
	for _, k := range []string{ContextBytesPerInode, ContextNumberOfInodes} {
		if _, ok := format[k]; ok {
			return invalidParam("format option %q applies to ext4 only, not xfs", k)
		}
	}
	return nil
}

// addTag reads tagSpecification_N = "key=value".
func addTag(tags *map[string]string, key, value string) error {
	k, v, ok := strings.Cut(value, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return invalidParam("parameter %q must be key=value, not %q", key, value)
	}
	if *tags == nil {
		*tags = map[string]string{}
	}
	(*tags)[k] = strings.TrimSpace(v)
	return nil
}

func positiveInt32(key, value string) (int32, error) {
	n, err := strconv.ParseInt(value, 10, 32)
	if err != nil || n <= 0 {
		return 0, invalidParam("parameter %q must be a positive integer, not %q", key, value)
	}
	return int32(n), nil
}

// parseMutableParams reads VolumeAttributesClass parameters: type, iops and throughput.
func parseMutableParams(params map[string]string) (cloud.ModifyOptions, error) {
	var m cloud.ModifyOptions
	for _, key := range slices.Sorted(maps.Keys(params)) {
		value := params[key]
		var err error
		switch strings.ToLower(key) {
		case ParamType:
			m.VolumeType = value
		case ParamIOPS:
			m.IOPS, err = positiveInt32(key, value)
		case ParamThroughput:
			m.Throughput, err = positiveInt32(key, value)
		default:
			err = invalidParam("unknown mutable parameter %q (type, iops, throughput can change)", key)
		}
		if err != nil {
			return cloud.ModifyOptions{}, err
		}
	}
	return m, nil
}

// parseSnapshotParams reads VolumeSnapshotClass parameters: tags, plus the snapshotter's metadata.
func parseSnapshotParams(params map[string]string) (cloud.SnapshotOptions, error) {
	var o cloud.SnapshotOptions
	for _, key := range slices.Sorted(maps.Keys(params)) {
		value := params[key]
		switch {
		case strings.HasPrefix(strings.ToLower(key), ParamTagSpecPrefix):
			if err := addTag(&o.Tags, key, value); err != nil {
				return cloud.SnapshotOptions{}, err
			}
		case key == ParamSnapshotName, key == ParamSnapshotNamespace, key == ParamSnapshotContentName:
			if o.Tags == nil {
				o.Tags = map[string]string{}
			}
			o.Tags["kubernetes.io/created-for/"+strings.TrimPrefix(key, "csi.storage.k8s.io/")] = value
		default:
			return cloud.SnapshotOptions{}, invalidParam("unknown snapshot parameter %q", key)
		}
	}
	return o, nil
}
