package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// healthDeviceWait bounds the device lookup of NodeGetVolumeHealth: health is a quick look, not a wait.
const healthDeviceWait = 2 * time.Second

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
	_, isBlock, err := blockDevice(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", path)
	}
	if err != nil {
		return nil, rpcError(err)
	}
	if isBlock {
		size, err := deviceSize(path)
		if err != nil {
			return nil, rpcError(err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}, nil
	}
	_, mounted, err := mountAt(path)
	if err != nil {
		return nil, rpcError(err)
	}
	if !mounted {
		return nil, rpcError(fmt.Errorf("%w: volume %s: nothing is mounted at %s", errVolumeNotAtPath, volumeID, path))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, rpcError(&fs.PathError{Op: "statfs", Path: path, Err: err})
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// NodeGetVolumeHealth reports, from this node's view, whether the volume is usable at the paths the CO gives:
// INACCESSIBLE when a path no longer holds it, or its device is gone or being detached. Without paths it only
// checks that the device is attached; a volume with no device and nothing mounted is NotFound.
func (n *NodeServer) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	volumeID := req.GetVolumeId()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	h := healthReport{}
	seen := false // a path holds the volume (mount or device), so it exists on this node
	var devs []uint64
	if p := req.GetVolumePublishPath(); p != "" {
		dev, ok, err := volumeAt(p)
		if err != nil {
			return nil, rpcError(err)
		}
		if ok {
			seen, devs = true, append(devs, dev)
		} else {
			h.add("NotPublished", fmt.Sprintf("volume is not mounted at publish path %s", p))
		}
	}
	if p := req.GetStagingTargetPath(); p != "" {
		mi, mounted, err := mountAt(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			h.add("NotStaged", fmt.Sprintf("staging path %s does not exist", p))
		case err != nil:
			return nil, rpcError(err)
		case mounted:
			seen, devs = true, append(devs, mountDev(mi))
		}
		// An unmounted staging directory is normal for block volumes: nothing to report.
	}
	if !seen {
		findCtx, cancel := context.WithTimeout(ctx, healthDeviceWait)
		dev, err := n.devices.Find(findCtx, volumeID, nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, rpcError(ctx.Err())
		case errors.Is(err, errDeviceNotFound):
			return nil, status.Errorf(codes.NotFound, "volume %s is neither attached to nor mounted on this node", volumeID)
		case err != nil:
			return nil, rpcError(err)
		}
		rdev, _, err := blockDevice(dev)
		if err != nil {
			return nil, rpcError(err)
		}
		devs = append(devs, rdev)
	}
	for _, d := range devs {
		if reason, msg := n.deviceProblem(d); reason != "" {
			h.add(reason, msg)
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: volumeID, HealthStatuses: h.entries}}, nil
}

// volumeAt reports the device behind a published path: a bound device node or a mount. ok is false when the
// path is missing or holds neither.
func volumeAt(path string) (dev uint64, ok bool, err error) {
	rdev, isBlock, err := blockDevice(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	mi, mounted, err := mountAt(path)
	if err != nil || !mounted {
		return 0, false, err
	}
	if isBlock {
		return rdev, true, nil
	}
	return mountDev(mi), true, nil
}

// healthReport collects INACCESSIBLE entries, one per reason as the spec requires.
type healthReport struct {
	entries []*csi.VolumeHealth_VolumeHealthEntry
}

func (h *healthReport) add(reason, message string) {
	for _, e := range h.entries {
		if e.Reason == reason {
			return
		}
	}
	h.entries = append(h.entries, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: reason, Message: message})
}
