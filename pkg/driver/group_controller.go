package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// GroupControllerServer serves CSI's group controller service: volume group snapshots, crash-consistent across
// their volumes. It shares the controller's cloud and its in-flight holds.
type GroupControllerServer struct {
	csi.UnimplementedGroupControllerServer
	ctrl *ControllerServer
}

// NewGroupControllerServer serves the group controller RPCs beside ctrl.
func NewGroupControllerServer(ctrl *ControllerServer) *GroupControllerServer {
	return &GroupControllerServer{ctrl: ctrl}
}

// errSnapshotListMismatch: the snapshot IDs a request lists are not the group's.
var errSnapshotListMismatch = errors.New("the snapshot IDs are not the group's")

// errGroupMember: a snapshot of a group is deleted with its group only.
var errGroupMember = errors.New("the snapshot is part of a group snapshot")

func validGroupSnapshotID(id string) bool {
	return strings.HasPrefix(id, cloud.GroupIDPrefix) && len(id) > len(cloud.GroupIDPrefix)
}

func (g *GroupControllerServer) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}}}}}, nil
}

func groupSnapshotOf(grp *cloud.SnapshotGroup) *csi.VolumeGroupSnapshot {
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: grp.ID, CreationTime: timestamppb.New(grp.CreationTime), ReadyToUse: grp.ReadyToUse()}
	for _, s := range grp.Snapshots {
		out.Snapshots = append(out.Snapshots, snapshotOf(s))
	}
	return out
}

func (g *GroupControllerServer) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	name, sources := req.GetName(), req.GetSourceVolumeIds()
	switch {
	case name == "":
		return nil, status.Error(codes.InvalidArgument, "group snapshot name is required")
	case len(sources) == 0:
		return nil, status.Error(codes.InvalidArgument, "source volume IDs are required")
	}
	opts, err := parseGroupSnapshotParams(req.GetParameters())
	if err != nil {
		return nil, rpcError(err)
	}
	release, err := g.ctrl.inFlight.hold(ctx, "group snapshot name", name)
	if err != nil {
		return nil, err
	}
	defer release()
	for _, id := range sources {
		if !validVolumeID(id) {
			return nil, status.Errorf(codes.NotFound, "source volume %q does not exist", id)
		}
	}
	grp, err := g.ctrl.cloud.CreateSnapshotGroup(ctx, name, sources, opts)
	if err != nil {
		return nil, rpcError(fmt.Errorf("group snapshot %q of volumes %v: %w", name, sources, err))
	}
	klog.InfoS("Group snapshot created", "name", name, "groupSnapshotID", grp.ID, "volumeIDs", sources, "multiInstance", opts.MultiInstance,
		"ready", grp.ReadyToUse())
	if err := g.waitCompleted(ctx, grp); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: groupSnapshotOf(grp)}, nil
}

// groupWaitMargin is the part of the caller's deadline left for the reply after waiting for a group's snapshots;
// groupWaitDefault bounds the wait of a caller that set no deadline.
const (
	groupWaitMargin  = 2 * time.Second
	groupWaitDefault = time.Minute
)

// waitCompleted waits until every snapshot of grp has completed and updates grp with them. The external-snapshotter
// (v8) records each member's readiness from the first successful CreateVolumeGroupSnapshot reply only: a member
// reported not ready then stays so, whatever GetVolumeGroupSnapshot says later. So the reply waits, within the
// caller's deadline; snapshots still pending then are Unavailable, and the snapshotter's retry of the call (which
// finds the group by its tags, taken at the same instant) answers once they have completed.
func (g *GroupControllerServer) waitCompleted(ctx context.Context, grp *cloud.SnapshotGroup) error {
	if grp.ReadyToUse() {
		return nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(groupWaitDefault)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline.Add(-groupWaitMargin))
	defer cancel()
	for i, s := range grp.Snapshots {
		if s.ReadyToUse {
			continue
		}
		done, err := g.ctrl.cloud.WaitForSnapshot(wctx, s.ID)
		if err != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				return status.Errorf(codes.Unavailable, "group snapshot %s is taken; its snapshot %s has not completed yet: "+
					"retry to learn when it has", grp.ID, s.ID)
			}
			return rpcError(fmt.Errorf("group snapshot %s: %w", grp.ID, err))
		}
		grp.Snapshots[i] = done
	}
	klog.V(2).InfoS("Group snapshot completed", "groupSnapshotID", grp.ID)
	return nil
}

func (g *GroupControllerServer) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "group snapshot ID is required")
	}
	if !validGroupSnapshotID(id) {
		return nil, status.Errorf(codes.NotFound, "group snapshot %q does not exist", id)
	}
	grp, err := g.ctrl.cloud.GetSnapshotGroup(ctx, id)
	if err == nil {
		err = g.checkMembers(ctx, grp, req.GetSnapshotIds())
	}
	if err != nil {
		return nil, rpcError(fmt.Errorf("group snapshot %s: %w", id, err))
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: groupSnapshotOf(grp)}, nil
}

func (g *GroupControllerServer) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "group snapshot ID is required")
	}
	if !validGroupSnapshotID(id) {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	release, err := g.ctrl.inFlight.hold(ctx, "group snapshot", id)
	if err != nil {
		return nil, err
	}
	defer release()
	grp, err := g.ctrl.cloud.GetSnapshotGroup(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	case err == nil:
		err = g.checkMembers(ctx, grp, req.GetSnapshotIds())
	}
	if err != nil {
		return nil, rpcError(fmt.Errorf("delete group snapshot %s: %w", id, err))
	}
	for _, s := range grp.Snapshots {
		if err := g.ctrl.cloud.DeleteSnapshot(ctx, s.ID); err != nil && !errors.Is(err, cloud.ErrNotFound) {
			return nil, rpcError(fmt.Errorf("delete snapshot %s of group snapshot %s: %w", s.ID, id, err))
		}
	}
	klog.InfoS("Group snapshot deleted", "groupSnapshotID", id, "snapshots", len(grp.Snapshots))
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// checkMembers compares the snapshot IDs a request lists with the group's. Every snapshot of the group must be
// listed; a listed snapshot that is not the group's may be one a delete that failed halfway already removed,
// but not one that still exists.
func (g *GroupControllerServer) checkMembers(ctx context.Context, grp *cloud.SnapshotGroup, listed []string) error {
	if len(listed) == 0 {
		return nil
	}
	var members []string
	for _, s := range grp.Snapshots {
		members = append(members, s.ID)
		if !slices.Contains(listed, s.ID) {
			return fmt.Errorf("%w: snapshot %s of the group is not among %v", errSnapshotListMismatch, s.ID, listed)
		}
	}
	for _, id := range listed {
		if slices.Contains(members, id) || !validSnapshotID(id) {
			continue
		}
		_, err := g.ctrl.cloud.GetSnapshot(ctx, id)
		switch {
		case errors.Is(err, cloud.ErrNotFound):
		case err != nil:
			return err
		default:
			return fmt.Errorf("%w: snapshot %s is not one of the group's %v", errSnapshotListMismatch, id, members)
		}
	}
	return nil
}
