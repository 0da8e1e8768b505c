package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/topology"
)

const gib = int64(1) << 30

// DefaultVolumeSizeGiB is the size of a volume whose request names no capacity.
const DefaultVolumeSizeGiB = 1

// ControllerServer creates, attaches, grows, modifies and snapshots volumes through the cloud.
type ControllerServer struct {
	csi.UnimplementedControllerServer
	cloud    cloud.Cloud
	inFlight *inFlight

	zonesMu sync.Mutex
	zones   []string
}

// NewControllerServer serves the controller RPCs against c.
func NewControllerServer(c cloud.Cloud) *ControllerServer {
	return &ControllerServer{cloud: c, inFlight: newInFlight(nil)}
}

func (c *ControllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: controllerCapabilities()}, nil
}

// offeredZones lists the region's zones once; a region's zones do not change while the driver runs.
func (c *ControllerServer) offeredZones(ctx context.Context) ([]string, error) {
	c.zonesMu.Lock()
	defer c.zonesMu.Unlock()
	if c.zones != nil {
		return c.zones, nil
	}
	zones, err := c.cloud.ListZones(ctx)
	if err != nil {
		return nil, fmt.Errorf("list zones: %w", err)
	}
	for _, z := range zones {
		c.zones = append(c.zones, z.Name)
	}
	return c.zones, nil
}

// LearnZones lists the region's zones ahead of the first CreateVolume, which would otherwise wait for the call
// (CreateVolumes that arrive meanwhile wait for this one call, not a call each). A failure is only logged: the
// first CreateVolume lists them again.
func (c *ControllerServer) LearnZones(ctx context.Context) {
	if _, err := c.offeredZones(ctx); err != nil {
		klog.ErrorS(err, "Listing the region's zones at start failed; the first CreateVolume lists them")
	}
}

// sizeGiB turns a capacity range into whole GiB: the required size rounded up, within the limit.
func sizeGiB(r *csi.CapacityRange, fallback int64) (int32, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity range must not be negative")
	}
	if limit > 0 && required > limit {
		return 0, status.Errorf(codes.InvalidArgument, "required bytes %d exceed limit bytes %d", required, limit)
	}
	size := (required + gib - 1) / gib
	if required == 0 {
		size = fallback
		if limit > 0 {
			size = min(size, limit/gib)
		}
	}
	if limit > 0 && size*gib > limit || size < 1 {
		return 0, status.Errorf(codes.OutOfRange, "no whole number of GiB lies in the capacity range [%d, %d] bytes", required, limit)
	}
	if size > 1<<20 {
		return 0, status.Errorf(codes.OutOfRange, "%d GiB is beyond any volume type", size)
	}
	return int32(size), nil
}

func (c *ControllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	needs, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	params, err := parseVolumeParams(req.GetParameters(), req.GetMutableParameters())
	if err != nil {
		return nil, rpcError(err)
	}
	if needs.fsType != "" && params.fsType != "" && needs.fsType != params.fsType {
		return nil, status.Errorf(codes.InvalidArgument, "capability asks for %s but parameter %s says %s", needs.fsType, ParamFSType, params.fsType)
	}
	if !needs.block {
		// The filesystem the node will make: the provisioner puts the class's (or its default) in the capability.
		if err := checkFormatOptions(cmp.Or(needs.fsType, params.fsType, DefaultFS), params.format); err != nil {
			return nil, rpcError(err)
		}
	}
	opts := params.disk
	if needs.multiNode {
		if opts.VolumeType != "io1" && opts.VolumeType != "io2" {
			return nil, status.Error(codes.InvalidArgument, "MULTI_NODE_MULTI_WRITER needs an io1 or io2 volume (Multi-Attach)")
		}
		opts.MultiAttach = true
	}
	fallback := int64(DefaultVolumeSizeGiB)
	var cloneSource *cloud.Disk
	switch src := req.GetVolumeContentSource().GetType().(type) {
	case nil:
	case *csi.VolumeContentSource_Snapshot:
		opts.SnapshotID = src.Snapshot.GetSnapshotId()
		if !validSnapshotID(opts.SnapshotID) {
			return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist", opts.SnapshotID)
		}
		snap, err := c.cloud.GetSnapshot(ctx, opts.SnapshotID)
		if err != nil {
			return nil, rpcError(fmt.Errorf("source snapshot: %w", err))
		}
		fallback = int64(snap.SizeGiB)
	case *csi.VolumeContentSource_Volume:
		opts.SourceDiskID = src.Volume.GetVolumeId()
		if !validVolumeID(opts.SourceDiskID) {
			return nil, status.Errorf(codes.NotFound, "source volume %q does not exist", opts.SourceDiskID)
		}
		source, err := c.cloud.GetDisk(ctx, opts.SourceDiskID)
		if err != nil {
			return nil, rpcError(fmt.Errorf("source volume: %w", err))
		}
		// A clone is made in its source's zone: that zone must satisfy the requirements.
		if _, err := topology.ChooseZone(req.GetAccessibilityRequirements(), []string{source.Zone}); err != nil {
			return nil, rpcError(fmt.Errorf("clone of %s (in zone %s): %w", source.ID, source.Zone, err))
		}
		cloneSource = source
		fallback = int64(source.SizeGiB)
	default:
		return nil, status.Error(codes.InvalidArgument, "a volume's content source must be a snapshot or a volume")
	}
	if opts.InitializationRate != 0 && opts.SnapshotID == "" {
		// The rate applies to restores only; a class serves empty volumes and clones too.
		klog.V(4).InfoS("Parameter volumeInitializationRate ignored: the volume is not restored from a snapshot", "name", name)
		opts.InitializationRate = 0
	}
	if opts.SizeGiB, err = sizeGiB(req.GetCapacityRange(), fallback); err != nil {
		return nil, err
	}
	if cloneSource != nil && opts.SizeGiB < cloneSource.SizeGiB {
		return nil, status.Errorf(codes.OutOfRange, "a clone of %s needs at least its %d GiB, the capacity range allows %d GiB",
			cloneSource.ID, cloneSource.SizeGiB, opts.SizeGiB)
	}
	if params.iopsPerGB != 0 {
		if opts.IOPS, err = iopsPerGB(opts.VolumeType, opts.SizeGiB, params.iopsPerGB, params.allowIOPSIncrease); err != nil {
			return nil, rpcError(err)
		}
	}

	release, err := c.inFlight.hold(ctx, "volume name", name)
	if err != nil {
		return nil, err
	}
	defer release()
	if cloneSource != nil {
		opts.Zone = cloneSource.Zone
	} else {
		zones, err := c.offeredZones(ctx)
		if err != nil {
			return nil, rpcError(err)
		}
		if opts.Zone, err = topology.ChooseZone(req.GetAccessibilityRequirements(), zones); err != nil {
			return nil, rpcError(err)
		}
	}
	disk, err := c.cloud.CreateDisk(ctx, name, opts)
	if err != nil {
		return nil, rpcError(fmt.Errorf("create volume %q: %w", name, err))
	}
	klog.InfoS("Volume created", "name", name, "volumeID", disk.ID, "zone", disk.Zone, "sizeGiB", disk.SizeGiB, "type", disk.VolumeType)
	volCtx := params.format
	if params.fsType != "" {
		volCtx[ParamFSType] = params.fsType
	}
	if params.blockAttach {
		volCtx[ContextBlockAttachUntilInitialized] = "true"
	}
	if params.names.PVCName != "" && params.names.PVCNamespace != "" {
		volCtx[ContextPVCNamespace], volCtx[ContextPVCName] = params.names.PVCNamespace, params.names.PVCName
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           disk.ID,
		CapacityBytes:      int64(disk.SizeGiB) * gib,
		VolumeContext:      volCtx,
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: topology.Accessible(disk.Zone),
	}}, nil
}

// validVolumeID tells IDs the cloud could have issued; others cannot name an existing volume.
func validVolumeID(id string) bool { return strings.HasPrefix(id, "vol-") && len(id) > 4 }

func validSnapshotID(id string) bool { return strings.HasPrefix(id, "snap-") && len(id) > 5 }

func (c *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !validVolumeID(id) {
		return &csi.DeleteVolumeResponse{}, nil
	}
	release, err := c.inFlight.hold(ctx, "volume", id)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := c.cloud.DeleteDisk(ctx, id); err != nil && !errors.Is(err, cloud.ErrNotFound) {
		return nil, rpcError(fmt.Errorf("delete volume %s: %w", id, err))
	}
	klog.InfoS("Volume deleted", "volumeID", id)
	return &csi.DeleteVolumeResponse{}, nil
}

// existingDisk describes a volume, answering NotFound for IDs the cloud could not have issued.
func (c *ControllerServer) existingDisk(ctx context.Context, id string) (*cloud.Disk, error) {
	if !validVolumeID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", id)
	}
	disk, err := c.cloud.GetDisk(ctx, id)
	if err != nil {
		return nil, rpcError(fmt.Errorf("volume %s: %w", id, err))
	}
	return disk, nil
}

func (c *ControllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	disk, err := c.existingDisk(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	needs, err := checkCapabilities(req.GetVolumeCapabilities())
	if err == nil && needs.multiNode && !disk.MultiAttach {
		err = fmt.Errorf("volume %s is not Multi-Attach enabled", disk.ID)
	}
	if err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

func (c *ControllerServer) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	page, err := c.cloud.ListDisks(ctx, cloud.PageRequest{MaxResults: req.GetMaxEntries(), NextToken: req.GetStartingToken()})
	if err != nil {
		if req.GetStartingToken() != "" && errors.Is(err, cloud.ErrInvalidArgument) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not valid: %v", req.GetStartingToken(), err)
		}
		return nil, rpcError(fmt.Errorf("list volumes: %w", err))
	}
	out := &csi.ListVolumesResponse{NextToken: page.NextToken}
	for _, d := range page.Disks {
		var nodes []string
		for _, a := range d.Attachments {
			nodes = append(nodes, a.InstanceID)
		}
		out.Entries = append(out.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: d.ID, CapacityBytes: int64(d.SizeGiB) * gib, AccessibleTopology: topology.Accessible(d.Zone)},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
		})
	}
	return out, nil
}
