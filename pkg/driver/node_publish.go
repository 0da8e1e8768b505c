package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodePublishVolume bind-mounts the staged filesystem (or, for block volumes, the device node) onto the
// target path, read-only when asked. The staging path must be a mount of the volume's own device (for block:
// the device must be there, not staged with a filesystem), and the target missing, an empty mount point, or
// already the same publication.
func (n *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volumeID, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	readOnly := req.GetReadonly() || mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	_, block, err := checkVolumeCapability(req.GetVolumeCapability(), readOnly)
	if err != nil {
		return nil, err
	}
	if staging == "" {
		// The spec's code for a plugin with STAGE_UNSTAGE_VOLUME called without a staging path.
		return nil, status.Error(codes.FailedPrecondition, "staging target path is required: the driver stages volumes")
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPaths("target path", target, "staging target path", staging); err != nil {
		return nil, err
	}
	if target == staging {
		return nil, status.Errorf(codes.InvalidArgument, "target path and staging target path are both %s", target)
	}
	p := publication{volumeID: volumeID, target: target, staging: staging, readOnly: readOnly,
		singleWriter: mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER}

	release, err := n.lock(ctx, volumeID, target, staging)
	if err != nil {
		return nil, err
	}
	defer release()
	_, rdev, err := n.volumeDevice(volumeID, errNotStaged)
	if err == nil {
		if block {
			err = n.publishBlock(p, rdev)
		} else {
			err = n.publishMount(p, rdev, req.GetVolumeCapability().GetMount().GetMountFlags())
		}
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

func (n *NodeServer) publishMount(p publication, rdev uint64, mountFlags []string) error {
	smi, staged, err := mountAt(n.host, p.staging)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !staged || mountDev(smi) != rdev {
		return fmt.Errorf("%w: staging path %s is not a mount of volume %s's device", errNotStaged, p.staging, p.volumeID)
	}
	// The bind shares the staged filesystem's SELinux labels: a publish asking for others cannot have them.
	if conflict := seLinuxContextConflict(mountFlags, smi.VFSOptions); conflict != "" {
		return fmt.Errorf("%w: volume %s at %s: %s", errSELinuxLabels, p.volumeID, p.staging, conflict)
	}
	if p.singleWriter {
		mounts, err := mountsOfDevice(n.host, rdev)
		if err != nil {
			return err
		}
		for _, mi := range mounts {
			if mp := mi.Mountpoint; mp != smi.Mountpoint && !samePath(mp, p.target) {
				return status.Errorf(codes.FailedPrecondition, "volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", p.volumeID, mp)
			}
		}
	}
	if done, err := n.alreadyPublished(p, rdev, false); done || err != nil {
		return err
	}
	return n.bindMount(p, p.staging, withoutSELinuxContexts(mountFlags))
}

func (n *NodeServer) publishBlock(p publication, rdev uint64) error {
	smi, mounted, err := mountAt(n.host, p.staging)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: staging path %s does not exist", errNotStaged, p.staging)
	}
	if err != nil {
		return err
	}
	if mounted && mountDev(smi) == rdev {
		return fmt.Errorf("%w at %s: it cannot be published as a raw block device", errStagedAsFilesystem, p.staging)
	}
	if mounted {
		// Block staging leaves an unmounted directory: a mount point there is not this volume's staging.
		return fmt.Errorf("%w: staging path %s is a mount of %s, not volume %s's block staging", errNotStaged, p.staging, smi.Source, p.volumeID)
	}
	dev, err := n.devices.Lookup(p.volumeID)
	if err != nil {
		return err
	}
	if p.singleWriter {
		others, err := deviceBindMounts(n.host, rdev, filepath.Base(dev))
		if err != nil {
			return err
		}
		for _, o := range others {
			if !samePath(o, p.target) {
				return status.Errorf(codes.FailedPrecondition, "volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s", p.volumeID, o)
			}
		}
	}
	if done, err := n.alreadyPublished(p, rdev, true); done || err != nil {
		return err
	}
	return n.bindMount(p, dev, nil)
}

// alreadyPublished checks the target: done when it already is this publication; otherwise it is made ready
// for the bind mount (see prepareMountPoint). A target mounted from anything else, or holding data, is
// errPathInUse and is left as it is.
func (n *NodeServer) alreadyPublished(p publication, rdev uint64, block bool) (done bool, err error) {
	mi, mounted, err := mountAt(n.host, p.target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if mounted {
		got := mountedDevice(n.host, mi, p.target)
		if got != rdev || readOnlyMount(mi) != p.readOnly {
			return false, fmt.Errorf("%w: target %s is a mount of %s (%d:%d, read-only %v), not volume %s (read-only %v)",
				errPathInUse, p.target, mi.Source, unix.Major(got), unix.Minor(got), readOnlyMount(mi), p.volumeID, p.readOnly)
		}
		klog.V(4).InfoS("Volume already published", "volume", p.volumeID, "target", p.target)
		return true, nil
	}
	return false, prepareMountPoint(p.target, p.volumeID, block)
}

// bindMount binds source onto the target; mount-utils remounts the bind with "ro" and the flags, which a plain
// bind would ignore.
func (n *NodeServer) bindMount(p publication, source string, mountFlags []string) error {
	opts := []string{"bind"}
	if p.readOnly {
		opts = append(opts, "ro")
	}
	opts = append(opts, mountFlags...)
	if err := n.host.mount(source, p.target, "", opts); err != nil {
		return fmt.Errorf("bind %s onto %s: %w", source, p.target, err)
	}
	klog.InfoS("Volume published", "volume", p.volumeID, "source", source, "target", p.target, "readOnly", p.readOnly)
	return nil
}

// NodeUnpublishVolume unmounts the volume from the target path and removes the mount point publish would
// have created. A mount of another device, or a path holding data, is left untouched (a foreign mount is
// reported as FailedPrecondition); a target that is already gone is fine.
func (n *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target path is required")
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPaths("target path", target); err != nil {
		return nil, err
	}
	release, err := n.lock(ctx, volumeID, target)
	if err != nil {
		return nil, err
	}
	defer release()
	unmounted, err := n.unmountVolume(volumeID, target)
	if err != nil {
		return nil, rpcError(err)
	}
	removed, err := removeMountPoint(target, volumeID, unmounted)
	if err != nil {
		return nil, rpcError(fmt.Errorf("remove target %s: %w", target, err))
	}
	if !removed {
		klog.InfoS("Target path left in place: not a mount point the driver created", "volume", volumeID, "target", target)
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
