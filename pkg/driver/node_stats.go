package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats reports capacity (and inodes, for filesystems) of the volume at volume_path. A path that
// does not hold the volume (missing, or no longer a mount point) is NotFound; why is NodeGetVolumeHealth's to say.
func (n *NodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	volumeID, path := req.GetVolumeId(), req.GetVolumePath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkVolumePath(volumeID, path); err != nil {
		return nil, err
	}
	// A published block target is a bind of the device node; anything else must be the volume's filesystem.
	at, err := n.volumeAtPath(volumeID, path, false)
	if err != nil {
		return nil, rpcError(err)
	}
	if at.mount == nil {
		size, err := n.host.deviceSize(at.dev)
		if err != nil {
			return nil, rpcError(err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}, nil
	}
	st, err := n.host.statfs(path)
	if err != nil {
		return nil, rpcError(err)
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}
