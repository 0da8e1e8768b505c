package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// healthProbeTimeout bounds each I/O probe of NodeGetVolumeHealth: a device or filesystem that does not answer
// in that time is itself the finding (the probe cannot be cancelled; it ends when the kernel gives up).
const healthProbeTimeout = 5 * time.Second

// probeBlock is how much of the device the read probe reads, aligned for O_DIRECT.
const probeBlock = 4096

// sysFSExt4 is where the kernel reports the state of each mounted ext4, by device name.
const sysFSExt4 = "/sys/fs/ext4"

// NodeGetVolumeHealth reports, from this node's view, whether the volume is usable: abnormal, with the reason,
// when a given path no longer holds it (or holds another device), when its device is gone, being detached or
// fails a read, and when its filesystem is in the kernel's error state or answers with I/O errors. Only mounts
// of the volume's own device are looked at. A volume with no device and nothing mounted is NotFound.
func (n *NodeServer) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	volumeID := req.GetVolumeId()
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	publish, staging := req.GetVolumePublishPath(), req.GetStagingTargetPath()
	for _, p := range [][2]string{{"volume publish path", publish}, {"staging target path", staging}} {
		if p[1] != "" {
			if err := checkPaths(p[0], p[1]); err != nil {
				return nil, err
			}
		}
	}
	h := healthReport{}
	seen := false // the volume is on this node: its device, or a mount of it
	devs := map[uint64]bool{}
	for _, p := range []struct{ path, missing string }{{publish, "NotPublished"}, {staging, "NotStaged"}} {
		if p.path == "" {
			continue
		}
		mi, mounted, err := volumeMountAt(n.host, p.path, n.owns(volumeID))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			h.add(inaccessible, p.missing, fmt.Sprintf("%s does not exist", p.path))
		case errors.Is(err, errForeignPath):
			h.add(inaccessible, "ForeignMount", err.Error())
		case err != nil:
			return nil, rpcError(err)
		case mounted:
			seen = true
			dev := mountedDevice(n.host, mi, p.path)
			devs[dev] = true
			if dev == mountDev(mi) {
				n.filesystemProblems(ctx, &h, mi, p.path)
			}
		case p.path == publish:
			h.add(inaccessible, p.missing, fmt.Sprintf("volume is not mounted at publish path %s", p.path))
		}
		// An unmounted staging directory is normal for block volumes: nothing to report.
	}
	dev, err := n.devices.Lookup(volumeID)
	if err != nil {
		return nil, rpcError(err)
	}
	if dev != "" {
		rdev, _, err := n.host.blockDevice(dev)
		if err != nil {
			return nil, rpcError(err)
		}
		seen, devs[rdev] = true, true
	}
	if !seen {
		if !pathExists(publish) && !pathExists(staging) {
			return nil, status.Errorf(codes.NotFound, "volume %s is neither attached to nor mounted on this node", volumeID)
		}
		// The CO staged or published it here (its paths exist), but the device is not there.
		h.add(inaccessible, "DeviceMissing", fmt.Sprintf("volume %s has no device on this node", volumeID))
	}
	for d := range devs {
		n.deviceProblems(ctx, &h, d)
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: volumeID, HealthStatuses: h.entries}}, nil
}

// deviceProblems adds why the block device numbered rdev can no longer serve I/O.
func (n *NodeServer) deviceProblems(ctx context.Context, h *healthReport, rdev uint64) {
	if reason, msg := n.host.deviceCondition(ctx, rdev); reason != "" {
		h.add(inaccessible, reason, msg)
	}
}

// deviceCondition: gone, detached, emptied, or failing a direct read of its first block.
func (h *realHost) deviceCondition(ctx context.Context, rdev uint64) (reason, message string) {
	id := devID(rdev)
	name, err := h.sys.kernelName(rdev)
	if err != nil {
		return "DeviceGone", fmt.Sprintf("block device %s is gone: %v", id, err)
	}
	if isLoopName(name) {
		if d, bound, err := h.sys.block.Read(name); err == nil {
			switch {
			case !bound:
				return "DeviceDetached", fmt.Sprintf("loop device %s (%s) is no longer bound to the volume", name, id)
			case d.Autoclear:
				return "DetachPending", fmt.Sprintf("loop device %s was detached from the instance; it goes away when unmounted", name)
			case d.Deleted:
				return "BackingFileDeleted", fmt.Sprintf("the backing file of loop device %s was deleted", name)
			}
		}
	}
	if size, err := h.sys.attr(rdev, "size"); err == nil && size == "0" {
		return "DeviceEmpty", fmt.Sprintf("block device %s (%s) has no capacity", name, id)
	}
	node, err := h.deviceNode(rdev)
	if err != nil {
		return "DeviceGone", err.Error()
	}
	if err := probe(ctx, func() error { return readFirstBlock(node) }); err != nil {
		return "DeviceReadError", fmt.Sprintf("reading %s failed: %v", node, err)
	}
	return "", ""
}

// deviceNode finds a node for the block device numbered rdev under the device directory, by the kernel's
// name for it.
func (h *realHost) deviceNode(rdev uint64) (string, error) {
	uevent, err := h.sys.attr(rdev, "uevent")
	if err != nil {
		return "", fmt.Errorf("device %s: %w", devID(rdev), err)
	}
	for line := range strings.Lines(uevent) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "DEVNAME="); ok {
			node := filepath.Join(h.devDir, name)
			if got, isBlock, err := h.blockDevice(node); err == nil && isBlock && got == rdev {
				return node, nil
			}
		}
	}
	return "", fmt.Errorf("no device node for %s under %s", devID(rdev), h.devDir)
}

// filesystemProblems adds the kernel's verdict on the filesystem mounted at path: shut down or made read-only
// after errors, errors recorded (ext4), or I/O errors when opening its root.
func (n *NodeServer) filesystemProblems(ctx context.Context, h *healthReport, mi *mountinfo.Info, path string) {
	super := strings.Split(mi.VFSOptions, ",")
	switch {
	case slices.Contains(super, "shutdown"):
		h.add(inaccessible, "FilesystemShutdown", fmt.Sprintf("the kernel shut down the %s filesystem at %s after errors", mi.FSType, path))
	case slices.Contains(super, "emergency_ro"),
		// Kernels before ext4's emergency_ro flag (6.x) remount the superblock read-only under a mount that
		// still says rw: the node mounts read-only only on both levels.
		slices.Contains(super, "ro") && !readOnlyMount(mi):
		h.add(inaccessible, "FilesystemReadOnlyAfterErrors", fmt.Sprintf("the kernel made the %s filesystem at %s read-only after errors", mi.FSType, path))
	}
	// The kernel's ext4 driver mounts ext3 too, and reports both under /sys/fs/ext4.
	if extFS(mi.FSType) {
		if name, err := n.sys.kernelName(mountDev(mi)); err == nil {
			dir := filepath.Join(sysFSExt4, name)
			if count, err := readSysInt(filepath.Join(dir, "errors_count")); err == nil && count > 0 {
				fn, _ := os.ReadFile(filepath.Join(dir, "last_error_func"))
				h.add(degraded, "FilesystemErrors", fmt.Sprintf("%s at %s recorded %d errors (last in %s); it needs fsck",
					mi.FSType, path, count, strings.TrimSpace(string(fn))))
			}
		}
	}
	err := probe(ctx, func() error {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	switch {
	case err == nil:
	case errors.Is(err, unix.EIO) && mi.FSType == FSXFS:
		// XFS shows no shutdown in its mount options; once shut down (a failed log or metadata write), it
		// answers every operation, opening its root included, with EIO.
		h.add(inaccessible, "FilesystemShutdown", fmt.Sprintf("the kernel shut down the xfs filesystem at %s after errors (opening it: %v); it needs unmounting and xfs_repair", path, err))
	default:
		h.add(inaccessible, "FilesystemIOError", fmt.Sprintf("opening %s failed: %v", path, err))
	}
}

// probe runs one I/O check, giving up on it after healthProbeTimeout.
func probe(ctx context.Context, check func() error) error {
	done := make(chan error, 1)
	go func() { done <- check() }()
	t := time.NewTimer(healthProbeTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("no answer after %s", healthProbeTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readFirstBlock reads the device's first block past the page cache, so that the device itself answers.
func readFirstBlock(node string) error {
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	raw := make([]byte, 2*probeBlock)
	off := (probeBlock - int(uintptr(unsafe.Pointer(&raw[0]))%probeBlock)) % probeBlock
	_, err = unix.Pread(fd, raw[off:off+probeBlock], 0)
	return err
}

func pathExists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Lstat(p)
	return err == nil
}

func readSysInt(file string) (int64, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

const (
	inaccessible = csi.VolumeHealthErrorType_INACCESSIBLE
	degraded     = csi.VolumeHealthErrorType_DEGRADED
)

// healthReport collects abnormal entries, one per reason as the spec requires.
type healthReport struct {
	entries []*csi.VolumeHealth_VolumeHealthEntry
}

func (h *healthReport) add(st csi.VolumeHealthErrorType, reason, message string) {
	for _, e := range h.entries {
		if e.Reason == reason {
			return
		}
	}
	h.entries = append(h.entries, &csi.VolumeHealth_VolumeHealthEntry{Status: st, Reason: reason, Message: message})
}
