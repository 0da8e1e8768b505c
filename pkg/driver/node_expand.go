package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"unsafe"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// ext4IOCResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a mounted ext4 to a block count.
const ext4IOCResizeFS = 0x40086610

// NodeExpandVolume grows the filesystem on volume_path (publish target or staging path) to the size of its
// device; the controller has grown the device before. Block volumes have nothing to grow.
func (n *NodeServer) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	volumeID, path := req.GetVolumeId(), req.GetVolumePath()
	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	blockCap := false
	if c := req.GetVolumeCapability(); c != nil {
		_, b, err := checkVolumeCapability(c, false)
		if err != nil {
			return nil, err
		}
		blockCap = b
	}
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkVolumePath(volumeID, path); err != nil {
		return nil, err
	}
	release, err := n.lock(ctx, volumeID, path)
	if err != nil {
		return nil, err
	}
	defer release()

	at, err := n.volumeAtPath(volumeID, path, blockCap)
	if err != nil {
		return nil, rpcError(err)
	}
	if at.mount == nil {
		size, err := n.host.deviceSize(at.dev)
		if err != nil {
			return nil, rpcError(err)
		}
		return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
	}
	if fsType := at.mount.FSType; !supportedFS(fsType) {
		return nil, status.Errorf(codes.FailedPrecondition, "%s at %s cannot be grown (%s)", fsType, path, fsTypes)
	}
	capacity, err := n.host.growFS(ctx, at.mount.FSType, at.dev, path)
	if err != nil {
		return nil, rpcError(err)
	}
	klog.InfoS("Volume expanded", "volume", volumeID, "path", path, "capacity", capacity)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: capacity}, nil
}

// volumeAt is where a volume was found at a path: its device, and the filesystem mount when the path is one.
type volumeAt struct {
	dev   string
	mount *mountinfo.Info
}

// volumeAtPath finds the volume at a path a CO names as where it staged or published it (stats, expand): the
// bind mount of its device node, a mount of its filesystem, or for a block capability its staging directory.
// Whatever else is there is errVolumeNotAtPath, and is neither opened nor grown.
func (n *NodeServer) volumeAtPath(volumeID, path string, blockCap bool) (volumeAt, error) {
	dev, rdev, err := n.volumeDevice(volumeID, errVolumeNotAtPath)
	if err != nil {
		return volumeAt{}, err
	}
	mi, mounted, err := mountAt(n.host, path)
	if errors.Is(err, fs.ErrNotExist) {
		return volumeAt{}, fmt.Errorf("%w: volume path %s does not exist", errVolumeNotAtPath, path)
	}
	if err != nil {
		return volumeAt{}, err
	}
	if !mounted {
		// A block volume's staging directory holds no mount: the device is the volume.
		if st, err := os.Lstat(path); blockCap && err == nil && st.IsDir() {
			return volumeAt{dev: dev}, nil
		}
		return volumeAt{}, fmt.Errorf("%w: volume %s: nothing is mounted at %s", errVolumeNotAtPath, volumeID, path)
	}
	if got := mountedDevice(n.host, mi, path); got != rdev {
		return volumeAt{}, fmt.Errorf("%w: %s is a mount of %s (%d:%d), not of volume %s", errVolumeNotAtPath, path, mi.Source,
			unix.Major(got), unix.Minor(got), volumeID)
	}
	if _, isBlock, _ := n.host.blockDevice(path); isBlock {
		return volumeAt{dev: dev}, nil
	}
	return volumeAt{dev: dev, mount: mi}, nil
}

// growExt4Offline grows an unmounted ext4 (or ext3) to its device at stage, where no mount needs
// CAP_SYS_RESOURCE.
func (n *NodeServer) growExt4Offline(ctx context.Context, fsType, dev string, rdev uint64) error {
	if mounts, err := mountsOfDevice(n.host, rdev); err != nil || len(mounts) > 0 {
		// resize2fs on a mounted filesystem would attempt the online resize this path avoids.
		klog.V(4).InfoS("Not growing ext4 offline: device is mounted", "device", dev, "err", err)
		return nil
	}
	_, err := n.host.growFS(ctx, fsType, dev, "")
	return err
}

func (h *realHost) growFS(ctx context.Context, fsType, dev, mountPoint string) (int64, error) {
	switch {
	case fsType == FSXFS:
		return h.growToDevice(dev, func() (int64, int64, error) { return h.xfsGeometry(ctx, mountPoint) }, func(bs, newBlocks int64) error {
			klog.InfoS("Growing xfs", "device", dev, "mountPoint", mountPoint, "to", bs*newBlocks)
			return h.resizeFs(dev, mountPoint)
		})
	case extFS(fsType) && mountPoint == "":
		var bigalloc bool
		geometry := func() (int64, int64, error) {
			out, err := h.dumpe2fs(ctx, dev)
			bigalloc = ext4Bigalloc.Match(out)
			if err != nil {
				return 0, 0, err
			}
			return parseGeometry(out, ext4BlockSize, 1, ext4BlockCount, 1)
		}
		return h.growToDevice(dev, geometry, func(bs, newBlocks int64) error {
			klog.InfoS("Growing ext4 offline", "device", dev, "to", bs*newBlocks, "bigalloc", bigalloc)
			// resize2fs wants a freshly checked filesystem.
			if out, err := h.mounter.Exec.CommandContext(ctx, "e2fsck", "-f", "-p", dev).CombinedOutput(); err != nil {
				// 1 and 2: errors were corrected.
				var ee utilexec.ExitError
				if !errors.As(err, &ee) || ee.ExitStatus() > 2 {
					return fmt.Errorf("e2fsck -f -p %s before growing: %w: %s", dev, err, out)
				}
			}
			if bigalloc {
				// resize2fs grows bigalloc (e2fsprogs 1.43 and later) but, offline, only when forced ("has not
				// been fully tested"); e2fsck has just checked the filesystem, the one check -f skips.
				if out, err := h.mounter.Exec.CommandContext(ctx, "resize2fs", "-f", dev).CombinedOutput(); err != nil {
					return fmt.Errorf("grow the filesystem on %s: resize2fs -f: %w: %s", dev, err, out)
				}
				return nil
			}
			return h.resizeFs(dev, "")
		})
	case extFS(fsType):
		return h.growToDevice(dev, func() (int64, int64, error) { return h.ext4Geometry(ctx, dev) }, func(bs, newBlocks int64) error {
			return growExt4Online(dev, mountPoint, bs, newBlocks)
		})
	}
	return 0, fmt.Errorf("%s cannot be grown (%s)", fsType, fsTypes)
}

// growToDevice grows a filesystem when its device is larger by a block or more, and returns the filesystem's
// size: geometry reads block size and count, grow makes the filesystem newBlocks blocks long.
func (h *realHost) growToDevice(dev string, geometry func() (blockSize, blocks int64, err error), grow func(blockSize, newBlocks int64) error) (int64, error) {
	devSize, err := h.deviceSize(dev)
	if err != nil {
		return 0, err
	}
	bs, blocks, err := geometry()
	if err != nil {
		return 0, err
	}
	if devSize-bs*blocks < bs {
		return bs * blocks, nil
	}
	if err := grow(bs, devSize/bs); err != nil {
		return 0, err
	}
	bs, blocks, err = geometry()
	if err != nil {
		return 0, err
	}
	return bs * blocks, nil
}

// resizeFs grows the filesystem on dev (mounted at mountPoint, for xfs) with mount-utils' ResizeFs, which
// runs resize2fs or xfs_growfs as the filesystem asks.
func (h *realHost) resizeFs(dev, mountPoint string) error {
	if _, err := mount.NewResizeFs(h.mounter.Exec).Resize(dev, mountPoint); err != nil {
		return fmt.Errorf("grow the filesystem on %s: %w", dev, err)
	}
	return nil
}

// growExt4Online grows a mounted ext4 with EXT4_IOC_RESIZE_FS. The ioctl is used rather than resize2fs so
// that a refusal (EPERM without CAP_SYS_RESOURCE) comes back as an errno, at once.
func growExt4Online(dev, mountPoint string, bs, newBlocks int64) error {
	fd, err := unix.Open(mountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: mountPoint, Err: err}
	}
	defer unix.Close(fd)
	klog.InfoS("Growing ext4 online", "device", dev, "mountPoint", mountPoint, "to", bs*newBlocks)
	arg := uint64(newBlocks)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ext4IOCResizeFS, uintptr(unsafe.Pointer(&arg))); errno != 0 {
		if errno == unix.EPERM {
			return fmt.Errorf("%w: growing ext4 on %s (%s) to %d bytes: %v; it grows when the volume is next staged (offline)",
				errOnlineResizeRefused, mountPoint, dev, bs*newBlocks, errno)
		}
		return fmt.Errorf("grow ext4 on %s (%s): %w", mountPoint, dev, errno)
	}
	return nil
}

var (
	ext4BlockCount = regexp.MustCompile(`(?m)^Block count:\s+(\d+)\s*$`)
	ext4BlockSize  = regexp.MustCompile(`(?m)^Block size:\s+(\d+)\s*$`)
	ext4Bigalloc   = regexp.MustCompile(`(?m)^Filesystem features:.*\sbigalloc(\s|$)`)
	xfsData        = regexp.MustCompile(`(?m)^data\s+=\s+bsize=(\d+)\s+blocks=(\d+)`)
)

// ext4Geometry reads block size and block count from the superblock (dumpe2fs -h); statfs would leave the
// metadata overhead out.
func (h *realHost) ext4Geometry(ctx context.Context, dev string) (blockSize, blocks int64, err error) {
	out, err := h.dumpe2fs(ctx, dev)
	if err != nil {
		return 0, 0, err
	}
	return parseGeometry(out, ext4BlockSize, 1, ext4BlockCount, 1)
}

// dumpe2fs is what dumpe2fs -h says of the superblock on dev.
func (h *realHost) dumpe2fs(ctx context.Context, dev string) ([]byte, error) {
	out, err := h.mounter.Exec.CommandContext(ctx, "dumpe2fs", "-h", dev).Output()
	if err != nil {
		return nil, fmt.Errorf("dumpe2fs -h %s: %w", dev, err)
	}
	return out, nil
}

// xfsGeometry reads the data section's block size and count of a mounted XFS.
func (h *realHost) xfsGeometry(ctx context.Context, mountPoint string) (blockSize, blocks int64, err error) {
	out, err := h.mounter.Exec.CommandContext(ctx, "xfs_info", mountPoint).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("xfs_info %s: %w", mountPoint, err)
	}
	return parseGeometry(out, xfsData, 1, xfsData, 2)
}

func parseGeometry(out []byte, sizeRE *regexp.Regexp, sizeGroup int, countRE *regexp.Regexp, countGroup int) (int64, int64, error) {
	s := sizeRE.FindSubmatch(out)
	c := countRE.FindSubmatch(out)
	if s == nil || c == nil {
		return 0, 0, fmt.Errorf("no block size and count in %q", out)
	}
	bs, err1 := strconv.ParseInt(string(s[sizeGroup]), 10, 64)
	blocks, err2 := strconv.ParseInt(string(c[countGroup]), 10, 64)
	if err1 != nil || err2 != nil || bs <= 0 {
		return 0, 0, fmt.Errorf("malformed block size %q or count %q", s[sizeGroup], c[countGroup])
	}
	return bs, blocks, nil
}
