package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

func snapshotOf(s *cloud.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: s.ID, SourceVolumeId: s.SourceVolumeID, SizeBytes: int64(s.SizeGiB) * gib,
		CreationTime: timestamppb.New(s.CreationTime), ReadyToUse: s.ReadyToUse, GroupSnapshotId: s.GroupID}
}

func (c *ControllerServer) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, source := req.GetName(), req.GetSourceVolumeId()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "snapshot name is required")
	case source == "":
		return nil, status.Error(codes.InvalidArgument, "source volume ID is required")
	}
	params, err := parseSnapshotParams(req.GetParameters())
	if err != nil {
		return nil, rpcError(err)
	}
	// Zones are checked before the snapshot is made, so that a typo refuses the request rather than
	// leave a snapshot without its fast restores.
	if err := c.checkZones(ctx, params.fastRestoreZones); err != nil {
		return nil, rpcError(err)
	}
	release, err := c.inFlight.hold(ctx, "snapshot name", name)
	if err != nil {
		return nil, err
	}
	defer release()
	if !validVolumeID(source) {
		return nil, status.Errorf(codes.NotFound, "source volume %q does not exist", source)
	}
	snap, err := c.cloud.CreateSnapshot(ctx, name, source, params.opts)
	if err != nil {
		return nil, rpcError(fmt.Errorf("snapshot %q of volume %s: %w", name, source, err))
	}
	if err := c.enableFastRestores(ctx, snap, params.fastRestoreZones); err != nil {
		return nil, rpcError(err)
	}
	klog.InfoS("Snapshot created", "name", name, "snapshotID", snap.ID, "volumeID", source, "ready", snap.ReadyToUse)
	return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(snap)}, nil
}

// checkZones refuses zones the region does not offer.
func (c *ControllerServer) checkZones(ctx context.Context, zones []string) error {
	if len(zones) == 0 {
		return nil
	}
	offered, err := c.offeredZones(ctx)
	if err != nil {
		return err
	}
	for _, z := range zones {
		if !slices.Contains(offered, z) {
			return invalidParam("parameter %q: zone %q is not one of the region's (%s)", ParamFastSnapshotRestoreZones, z, strings.Join(offered, ", "))
		}
	}
	return nil
}

// enableFastRestores turns on fast snapshot restore for a new snapshot in zones, right after its creation
// (the cloud accepts it for a pending snapshot). When the cloud refuses, the snapshot is deleted, as the EBS
// driver does, so that the retried CreateSnapshot makes it anew with its fast restores rather than find a
// snapshot without them. A retry after success enables again, which is idempotent.
func (c *ControllerServer) enableFastRestores(ctx context.Context, snap *cloud.Snapshot, zones []string) error {
	if len(zones) == 0 {
		return nil
	}
	err := c.cloud.EnableFastSnapshotRestores(ctx, snap.ID, zones)
	if err == nil {
		return nil
	}
	if derr := c.cloud.DeleteSnapshot(ctx, snap.ID); derr != nil && !errors.Is(derr, cloud.ErrNotFound) {
		return fmt.Errorf("fast snapshot restore of snapshot %s in %v: %w; deleting the snapshot failed too: %w", snap.ID, zones, err, derr)
	}
	klog.InfoS("Fast snapshot restore refused; snapshot deleted", "snapshotID", snap.ID, "zones", zones, "err", err)
	return fmt.Errorf("fast snapshot restore of snapshot %s in %v (the snapshot was deleted): %w", snap.ID, zones, err)
}

func (c *ControllerServer) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is required")
	}
	if !validSnapshotID(id) {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	release, err := c.inFlight.hold(ctx, "snapshot", id)
	if err != nil {
		return nil, err
	}
	defer release()
	// A snapshot of a group goes with its group only (CSI lets the plugin refuse it), so that no group is left
	// without one of its volumes.
	snap, err := c.cloud.GetSnapshot(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return &csi.DeleteSnapshotResponse{}, nil
	case err != nil:
		return nil, rpcError(fmt.Errorf("delete snapshot %s: %w", id, err))
	case snap.GroupID != "":
		return nil, rpcError(fmt.Errorf("%w %s: delete snapshot %s with its group", errGroupMember, snap.GroupID, id))
	}
	if err := c.cloud.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, cloud.ErrNotFound) {
		return nil, rpcError(fmt.Errorf("delete snapshot %s: %w", id, err))
	}
	klog.InfoS("Snapshot deleted", "snapshotID", id)
	return &csi.DeleteSnapshotResponse{}, nil
}

func (c *ControllerServer) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	if id := req.GetSnapshotId(); id != "" {
		if !validSnapshotID(id) {
			return &csi.ListSnapshotsResponse{}, nil
		}
		snap, err := c.cloud.GetSnapshot(ctx, id)
		switch {
		case errors.Is(err, cloud.ErrNotFound):
			return &csi.ListSnapshotsResponse{}, nil
		case err != nil:
			return nil, rpcError(err)
		case req.GetSourceVolumeId() != "" && snap.SourceVolumeID != req.GetSourceVolumeId():
			return &csi.ListSnapshotsResponse{}, nil
		}
		return &csi.ListSnapshotsResponse{Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: snapshotOf(snap)}}}, nil
	}
	if src := req.GetSourceVolumeId(); src != "" && !validVolumeID(src) {
		return &csi.ListSnapshotsResponse{}, nil
	}
	page, err := c.cloud.ListSnapshots(ctx, cloud.SnapshotListOptions{SourceVolumeID: req.GetSourceVolumeId(),
		Page: cloud.PageRequest{MaxResults: req.GetMaxEntries(), NextToken: req.GetStartingToken()}})
	if err != nil {
		if req.GetStartingToken() != "" && errors.Is(err, cloud.ErrInvalidArgument) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not valid: %v", req.GetStartingToken(), err)
		}
		return nil, rpcError(fmt.Errorf("list snapshots: %w", err))
	}
	out := &csi.ListSnapshotsResponse{NextToken: page.NextToken}
	for _, s := range page.Snapshots {
		out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotOf(s)})
	}
	return out, nil
}

func (c *ControllerServer) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID is required")
	}
	if !validSnapshotID(id) {
		return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist", id)
	}
	snap, err := c.cloud.GetSnapshot(ctx, id)
	if err != nil {
		return nil, rpcError(fmt.Errorf("snapshot %s: %w", id, err))
	}
	return &csi.GetSnapshotResponse{Snapshot: snapshotOf(snap)}, nil
}
