package driver

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

func (c *ControllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range is required")
	}
	size, err := sizeGiB(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	if !validVolumeID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", id)
	}
	// No in-flight hold: the cloud queues the modifications of a volume and folds an expansion and a
	// modification that meet into one, so neither is turned away (Aborted) for the other.
	got, err := c.cloud.ResizeDisk(ctx, id, size)
	if err != nil {
		return nil, rpcError(fmt.Errorf("grow volume %s to %d GiB: %w", id, size, err))
	}
	klog.InfoS("Volume grown", "volumeID", id, "sizeGiB", got)
	// A block volume is used as it is; a filesystem must be grown by the node.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(got) * gib, NodeExpansionRequired: req.GetVolumeCapability().GetBlock() == nil}, nil
}

func (c *ControllerServer) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	m, err := parseMutableParams(req.GetMutableParameters())
	if err != nil {
		return nil, rpcError(err)
	}
	tags, err := m.tags()
	if err != nil {
		return nil, rpcError(err)
	}
	if !validVolumeID(id) {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", id)
	}
	opts := m.modify
	if opts == (cloud.ModifyOptions{}) && len(tags) == 0 && len(m.tagDeletions) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "nothing to modify on volume %s", id)
	}
	// Tags first: quick, and applied again harmlessly when a modification that follows is retried.
	if len(tags) > 0 || len(m.tagDeletions) > 0 {
		if err := c.cloud.TagDisk(ctx, id, tags, m.tagDeletions); err != nil {
			return nil, rpcError(fmt.Errorf("tag volume %s: %w", id, err))
		}
	}
	if opts != (cloud.ModifyOptions{}) {
		if _, err := c.cloud.ModifyDisk(ctx, id, opts); err != nil {
			return nil, rpcError(fmt.Errorf("modify volume %s: %w", id, err))
		}
	}
	klog.InfoS("Volume modified", "volumeID", id, "type", opts.VolumeType, "iops", opts.IOPS, "throughput", opts.Throughput,
		"tagsSet", len(tags), "tagsRemoved", len(m.tagDeletions))
	return &csi.ControllerModifyVolumeResponse{}, nil
}
