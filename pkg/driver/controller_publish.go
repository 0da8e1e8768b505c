package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
	release, err := c.inFlight.hold(ctx, "volume", volumeID)
	if err != nil {
		return nil, err
	}
	defer release()
	disk, err := c.publishView(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	if needs.multiNode && !disk.MultiAttach {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is not Multi-Attach enabled", volumeID)
	}
	var att *cloud.Attachment
	for _, a := range disk.Attachments {
		switch {
		case a.InstanceID == nodeID:
			att = &a
		case !disk.MultiAttach:
			// FailedPrecondition (ErrInUse), naming the other node and its state: a stopped or lost node keeps
			// the volume until it is unpublished there (or, for a lost one, until EC2 ends its attachments).
			return nil, rpcError(fmt.Errorf("publish volume %s to node %s: %w", volumeID, nodeID, cloud.AttachedElsewhere(ctx, c.cloud, a)))
		}
	}
	// No DescribeInstances: a node that does not exist, or is terminated, is known from AttachVolume's answer
	// (NotFound: CSI's "node does not exist"), and a volume already published to the node is answered from the
	// attachment just read. A stopped node is published to as EC2 allows: the volume is there when it starts,
	// so its pods need not wait for another attach, and stopping is not the node's end.
	if att == nil && req.GetVolumeContext()[ContextBlockAttachUntilInitialized] == "true" {
		// Before the attach, not after: a pod can start only once the disk is attached, and this class asks
		// that it start on a disk at full speed. A publish the attacher gives up on is asked again and waits on.
		klog.V(2).InfoS("Waiting for the volume's initialization before attaching it", "volumeID", volumeID, "nodeID", nodeID)
		if err := c.cloud.WaitForInitialization(ctx, volumeID); err != nil {
			return nil, rpcError(fmt.Errorf("wait for the initialization of volume %s: %w", volumeID, err))
		}
	}
	switch {
	case att != nil && att.State == cloud.AttachmentAttached && att.Device != "":
		klog.V(2).InfoS("Volume already published", "volumeID", volumeID, "nodeID", nodeID, "device", att.Device)
	case att != nil && att.State == cloud.AttachmentAttaching && att.Device != "":
		att, err = c.cloud.WaitForAttachment(ctx, *att)
	default:
		att, err = c.cloud.AttachDisk(ctx, volumeID, nodeID)
	}
	if err != nil {
		return nil, rpcError(fmt.Errorf("attach volume %s to node %s: %w", volumeID, nodeID, err))
	}
	klog.InfoS("Volume published", "volumeID", volumeID, "nodeID", nodeID, "device", att.Device)
	// The size lets a node whose devices do not say whose they are (Xen instances) check the named device.
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishDevicePath: att.Device,
		PublishVolumeSize: strconv.FormatInt(int64(disk.SizeGiB)*gib, 10)}}, nil
}

// publishView is the disk as a publish decides on it. A disk the cloud showed a moment ago without any
// attachment (as the wait of the CreateVolume just before it did) is taken as shown, with no call: what
// follows is AttachVolume, which answers for itself if that has changed (VolumeInUse leads to a fresh read;
// a deleted disk gives NotFound). A disk with attachments, or not seen lately, is read anew.
func (c *ControllerServer) publishView(ctx context.Context, volumeID string) (*cloud.Disk, error) {
	if d, ok := c.cloud.RecentDisk(volumeID); ok && len(d.Attachments) == 0 {
		return d, nil
	}
	return c.existingDisk(ctx, volumeID)
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
