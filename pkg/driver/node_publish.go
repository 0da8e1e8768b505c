package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// NodePublishVolume bind-mounts the staged filesystem (or, for block volumes, the device node) onto the
// target path, read-only when asked.
func (n *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volumeID, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	_, block, err := checkVolumeCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required: the driver stages volumes")
	}
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	readOnly := req.GetReadonly() || mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	p := publication{volumeID: volumeID, target: target, staging: staging, readOnly: readOnly,
		singleWriter: mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER}

	release, err := n.lock(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	defer release()
	if block {
		err = n.publishBlock(ctx, p, req.GetPublishContext())
	} else {
		err = n.publishMount(p, req.GetVolumeCapability().GetMount().GetMountFlags())
	}
	if err != nil {
		return nil, rpcError(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

type publication struct {
	volumeID, target, staging string
	readOnly, singleWriter    bool
}

func (n *NodeServer) publishMount(p publication, mountFlags []string) error {
	smi, staged, err := mountAt(p.staging)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !staged {
		return fmt.Errorf("%w: nothing is mounted at staging path %s", errNotStaged, p.staging)
	}
	dev := mountDev(smi)
	if p.singleWriter {
		mounts, err := mountsOfDevice(dev)
		if err != nil {
			return err
		}
		for _, mi := range mounts {
			if mp := mi.Mountpoint; mp != smi.Mountpoint && !samePath(mp, p.target) {
				return status.Errorf(codes.FailedPrecondition, "volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", p.volumeID, mp)
			}
		}
	}
	mi, mounted, err := mountAt(p.target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if mounted {
		if mountDev(mi) != dev || readOnlyMount(mi) != p.readOnly {
			return fmt.Errorf("%w: target %s is mounted from %d:%d (read-only %v), not from the staged volume %s (read-only %v)",
				errPathInUse, p.target, mi.Major, mi.Minor, readOnlyMount(mi), p.volumeID, p.readOnly)
		}
		klog.V(4).InfoS("Volume already published", "volume", p.volumeID, "target", p.target)
		return nil
	}
	if err := os.MkdirAll(p.target, 0o750); err != nil {
		return err
	}
	return n.bindMount(p, p.staging, mountFlags)
}

func (n *NodeServer) publishBlock(ctx context.Context, p publication, publishContext map[string]string) error {
	dev, err := n.devices.Find(ctx, p.volumeID, publishContext)
	if err != nil {
		return err
	}
	rdev, _, err := blockDevice(dev)
	if err != nil {
		return err
	}
	if p.singleWriter {
		others, err := deviceBindMounts(rdev, filepath.Base(dev))
		if err != nil {
			return err
		}
		for _, o := range others {
			if !samePath(o, p.target) {
				return status.Errorf(codes.FailedPrecondition, "volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", p.volumeID, o)
			}
		}
	}
	mi, mounted, err := mountAt(p.target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if mounted {
		got, isBlock, err := blockDevice(p.target)
		if err != nil {
			return err
		}
		if !isBlock || got != rdev || readOnlyMount(mi) != p.readOnly {
			return fmt.Errorf("%w: target %s is a mount of something else than %s (read-only %v)", errPathInUse, p.target, dev, p.readOnly)
		}
		klog.V(4).InfoS("Block volume already published", "volume", p.volumeID, "target", p.target)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.target), 0o750); err != nil {
		return err
	}
	// The bind mount needs a file to cover; the CO only creates the parent directory.
	f, err := os.OpenFile(p.target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return err
	}
	_ = f.Close()
	return n.bindMount(p, dev, nil)
}

// bindMount binds source onto the target; mount-utils remounts the bind with "ro" and the flags, which a plain
// bind would ignore.
func (n *NodeServer) bindMount(p publication, source string, mountFlags []string) error {
	opts := []string{"bind"}
	if p.readOnly {
		opts = append(opts, "ro")
	}
	opts = append(opts, mountFlags...)
	if err := n.mounter.Mount(source, p.target, "", opts); err != nil {
		return fmt.Errorf("bind %s onto %s: %w", source, p.target, err)
	}
	klog.InfoS("Volume published", "volume", p.volumeID, "source", source, "target", p.target, "readOnly", p.readOnly)
	return nil
}

// NodeUnpublishVolume unmounts and removes the target path; a target that is already gone is fine.
func (n *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	release, err := n.lock(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := mount.CleanupMountPoint(target, n.mounter, true); err != nil {
		return nil, rpcError(fmt.Errorf("clean up target %s: %w", target, err))
	}
	klog.V(4).InfoS("Volume unpublished", "volume", volumeID, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// samePath compares paths as the kernel lists them (symlinks resolved).
func samePath(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}
