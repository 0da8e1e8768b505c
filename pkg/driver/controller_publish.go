package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

func (c *ControllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	switch {
	case volumeID == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	case nodeID == "":
		return nil, status.Error(codes.InvalidArgument, "node ID is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	needs, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	disk, release, err := c.holdDisk(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	defer release()
	if _, err := c.cloud.GetInstance(ctx, nodeID); err != nil {
		if errors.Is(err, cloud.ErrNotFound) || errors.Is(err, cloud.ErrInvalidArgument) {
			return nil, status.Errorf(codes.NotFound, "node %q does not exist: %v", nodeID, err)
		}
		return nil, rpcError(fmt.Errorf("node %s: %w", nodeID, err))
	}
	if needs.multiNode && !disk.MultiAttach {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is not Multi-Attach enabled", volumeID)
	}
	for _, a := range disk.Attachments {
		if a.InstanceID != nodeID && !disk.MultiAttach {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published to node %s", volumeID, a.InstanceID)
		}
	}
	att, err := c.cloud.AttachDisk(ctx, volumeID, nodeID)
	if err != nil {
		return nil, rpcError(fmt.Errorf("attach volume %s to node %s: %w", volumeID, nodeID, err))
	}
	klog.InfoS("Volume published", "volumeID", volumeID, "nodeID", nodeID, "device", att.Device)
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishDevicePath: att.Device}}, nil
}

func (c *ControllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !validVolumeID(volumeID) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	release, err := c.inFlight.hold(ctx, "volume", volumeID)
	if err != nil {
		return nil, err
	}
	defer release()
	nodes := []string{nodeID}
	if nodeID == "" {
		// No node: unpublish from every node, as the spec asks.
		disk, err := c.cloud.GetDisk(ctx, volumeID)
		if errors.Is(err, cloud.ErrNotFound) {
			return &csi.ControllerUnpublishVolumeResponse{}, nil
		}
		if err != nil {
			return nil, rpcError(err)
		}
		nodes = nodes[:0]
		for _, a := range disk.Attachments {
			nodes = append(nodes, a.InstanceID)
		}
	}
	for _, n := range nodes {
		if err := c.cloud.DetachDisk(ctx, volumeID, n); err != nil && !errors.Is(err, cloud.ErrNotFound) {
			return nil, rpcError(fmt.Errorf("detach volume %s from node %s: %w", volumeID, n, err))
		}
		klog.InfoS("Volume unpublished", "volumeID", volumeID, "nodeID", n)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
