package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodeStageVolume makes the attached volume ready on the node: for a filesystem volume, formatted (only when
// blank) and mounted on the staging path, grown to the device's size. Block volumes need nothing beyond a
// device. Every step checks what is already there, so a repeat after a crash carries on where it stopped.
func (n *NodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	volumeID, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	fsType, block, err := checkVolumeCapability(req.GetVolumeCapability(), false)
	if err != nil {
		return nil, err
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPaths("staging target path", staging); err != nil {
		return nil, err
	}
	var formatOpts []string
	if !block {
		if fsType, err = stageFilesystem(fsType, req.GetVolumeContext()); err != nil {
			return nil, err
		}
		if formatOpts, err = mkfsOptions(fsType, req.GetVolumeContext()); err != nil {
			return nil, rpcError(err)
		}
		if fsType == FSXFS {
			formatOpts = append(formatOpts, n.legacyXFS...)
		}
	}
	release, err := n.lock(ctx, volumeID, staging)
	if err != nil {
		return nil, err
	}
	defer release()

	dev, err := n.devices.Find(ctx, volumeID, req.GetPublishContext())
	if err != nil {
		return nil, rpcError(err)
	}
	if block {
		err = n.stageBlock(volumeID, dev, staging)
	} else {
		mountFlags := req.GetVolumeCapability().GetMount().GetMountFlags()
		err = n.formatAndMount(ctx, volumeID, dev, staging, fsType, formatOpts, mountFlags)
	}
	if err != nil {
		return nil, rpcError(err)
	}
	// The volume is staged: its metrics are reported from now on. A failure to record it costs only them.
	vc := req.GetVolumeContext()
	if err := n.state.recordStaged(n.boot, stagedVolume{volumeID: volumeID, pvcNamespace: vc[ContextPVCNamespace],
		pvcName: vc[ContextPVCName]}); err != nil {
		klog.ErrorS(err, "Recording the staged volume for its metrics failed", "volume", volumeID)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageBlock needs nothing beyond the device, but keeps the staging directory meaningful for later calls
// (publish, health, expand): it must be an empty directory, and not hold a filesystem staging of the volume.
func (n *NodeServer) stageBlock(volumeID, dev, staging string) error {
	if _, mounted, err := mountAt(n.host, staging); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	} else if mounted {
		return fmt.Errorf("%w: staging path %s is a mount point; volume %s is staged as a block device", errPathInUse, staging, volumeID)
	}
	if err := prepareMountPoint(staging, volumeID, false); err != nil {
		return err
	}
	klog.V(4).InfoS("Block volume staged: nothing to mount", "volume", volumeID, "device", dev)
	return nil
}

func (n *NodeServer) formatAndMount(ctx context.Context, volumeID, dev, staging, fsType string, formatOpts, mountFlags []string) error {
	rdev, _, err := n.host.blockDevice(dev)
	if err != nil {
		return err
	}
	mi, mounted, err := mountAt(n.host, staging)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect staging path %s: %w", staging, err)
	}
	if mounted {
		if mountDev(mi) != rdev || mi.FSType != fsType {
			return fmt.Errorf("%w: staging path %s is mounted from %s (%d:%d, %s), not from volume %s's device %s (%s)",
				errPathInUse, staging, mi.Source, mi.Major, mi.Minor, mi.FSType, volumeID, dev, fsType)
		}
		// kubelet stages a volume once with the SELinux label of its pods: a stage asking for other labels than
		// the mount has would leave the pods unable to use it.
		if conflict := seLinuxContextConflict(mountFlags, mi.VFSOptions); conflict != "" {
			return fmt.Errorf("%w: volume %s is staged at %s, but %s", errPathInUse, volumeID, staging, conflict)
		}
		klog.V(4).InfoS("Volume already staged", "volume", volumeID, "device", dev, "stagingPath", staging)
		// A stage that crashed after mounting had not grown the filesystem yet. The mount is not this call's to
		// undo (kubelet may hold it as staged, uncertainly): a failure says it stays.
		if fsType == FSXFS {
			if _, err := n.host.growFS(ctx, fsType, dev, staging); err != nil {
				return fmt.Errorf("%w: %s: %w", errLeftMounted, staging, err)
			}
		}
		return nil
	}
	if err := prepareMountPoint(staging, volumeID, false); err != nil {
		return err
	}

	existing, err := n.existingFormat(volumeID, dev)
	if err != nil {
		return fmt.Errorf("probe %s for a filesystem: %w", dev, err)
	}
	switch existing {
	case "", fsType:
	default:
		return fmt.Errorf("%w: %s (volume %s) holds %q, the volume capability asks for %s; it is neither formatted nor mounted",
			errDeviceHasData, dev, volumeID, existing, fsType)
	}
	if extFS(existing) {
		// Growing before mounting: online ext4 growth needs CAP_SYS_RESOURCE, offline growth does not.
		if err := n.growExt4Offline(ctx, existing, dev, rdev); err != nil {
			return err
		}
	}

	opts := append([]string{}, mountFlags...)
	if fsType == FSXFS {
		// Restored snapshots and clones share their source's XFS UUID; without nouuid the second mount fails.
		opts = append(opts, "nouuid")
	}
	if err := n.mountStaged(volumeID, dev, staging, fsType, existing, opts, formatOpts); err != nil {
		return fmt.Errorf("format and mount %s on %s: %w", dev, staging, err)
	}
	klog.InfoS("Volume staged", "volume", volumeID, "device", dev, "stagingPath", staging, "fsType", fsType)
	// A filesystem mkfs has just made fills its device: only an existing one may need growing.
	if fsType == FSXFS && existing != "" {
		if _, err := n.host.growFS(ctx, fsType, dev, staging); err != nil {
			return n.undoStagingMount(volumeID, staging, err)
		}
	}
	return nil
}

// undoStagingMount unmounts the staging path a stage mounted before failing with cause: kubelet takes a final
// error for "nothing mounted" and would never unstage. When the unmount fails too, the answer says the
// volume is left mounted, with a code kubelet takes as uncertain, so that it retries or unstages.
func (n *NodeServer) undoStagingMount(volumeID, staging string, cause error) error {
	if _, err := n.unmountVolume(volumeID, staging); err != nil {
		return fmt.Errorf("%w: %s: %w (undoing the mount failed: %w)", errLeftMounted, staging, cause, err)
	}
	klog.InfoS("Stage failed after mounting: unmounted the staging path", "volume", volumeID, "stagingPath", staging, "err", cause)
	return cause
}

// mkfsOptions turns the format options of the volume context into mkfs arguments. The values are checked to
// be positive integers (or bigalloc's true), so nothing from a StorageClass reaches mkfs as a flag of its own.
func mkfsOptions(fsType string, volumeContext map[string]string) ([]string, error) {
	values := map[string]string{}
	for _, k := range formatKeys {
		v, ok := volumeContext[k]
		if !ok {
			continue
		}
		checked, err := formatValue(k, k, v)
		if err != nil {
			return nil, err
		}
		if checked != "" {
			values[k] = checked
		}
	}
	if err := checkFormatOptions(fsType, values); err != nil {
		return nil, err
	}
	var flags map[string]string
	switch fsType {
	case FSExt3, FSExt4:
		flags = map[string]string{ContextBlockSize: "-b", ContextInodeSize: "-I", ContextBytesPerInode: "-i", ContextNumberOfInodes: "-N",
			ContextExt4BigAlloc: "-O", ContextExt4ClusterSize: "-C"}
	case FSXFS:
		flags = map[string]string{ContextBlockSize: "-b", ContextInodeSize: "-i"}
	}
	var args []string
	for _, k := range formatKeys {
		v, ok := values[k]
		if !ok {
			continue
		}
		switch {
		case k == ContextExt4BigAlloc:
			v = "bigalloc"
		case fsType == FSXFS:
			v = "size=" + v
		}
		args = append(args, flags[k], v)
	}
	return args, nil
}

// NodeUnstageVolume unmounts the volume's filesystem from the staging path, and only that: a mount of another
// device there is left untouched and reported. The directory stays: the CO created it and removes it.
func (n *NodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volumeID, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path is required")
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPaths("staging target path", staging); err != nil {
		return nil, err
	}
	release, err := n.lock(ctx, volumeID, staging)
	if err != nil {
		return nil, err
	}
	defer release()
	if _, err := n.unmountVolume(volumeID, staging); err != nil {
		return nil, rpcError(err)
	}
	// The volume's device record (Xen devices) and its staged record are done with: nothing of the volume is
	// mounted any more. So is
	// the record of an unfinished mkfs: whatever the device holds from now on may be data (see node_state.go).
	if err := errors.Join(n.state.forgetStagedDevice(volumeID), n.state.forgetStaged(volumeID), n.state.finishFormat(volumeID)); err != nil {
		return nil, rpcError(err)
	}
	klog.V(4).InfoS("Volume unstaged", "volume", volumeID, "stagingPath", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}
