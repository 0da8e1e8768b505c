package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// DeviceFinder finds the block device of a volume attached to this node.
type DeviceFinder interface {
	// Find returns the path of the volume's device node, waiting for it to appear. A device that does not
	// appear in time is errDeviceNotFound (wrapping the context's error when the caller's deadline ended it).
	Find(ctx context.Context, volumeID string, publishContext map[string]string) (string, error)
	// Lookup returns the device node of the volume when it is attached now, "" when it is not; it does not wait.
	Lookup(volumeID string) (string, error)
	// Owns reports whether the block device numbered rdev is, or was until a detach still in progress, the
	// volume's device, by what the kernel says about it: a mount of it is the volume's mount.
	Owns(volumeID string, rdev uint64) (bool, error)
}

// ebsNVMePrefix is the by-id link udev makes for an EBS volume on Nitro instances: the NVMe serial is the
// volume ID without its dash.
const ebsNVMePrefix = "nvme-Amazon_Elastic_Block_Store_"

// Backoff of the wait for a device.
const (
	deviceBackoffStart = 50 * time.Millisecond
	deviceBackoffMax   = time.Second
)

// deviceFinder looks for fakecloud's loop devices (backing file <volumeID>.img) and EBS NVMe devices. It
// identifies a device by what the kernel says about it (backing file, serial), never by a name alone: the
// device name in the publish context and stale /dev entries can point at another volume's device.
type deviceFinder struct {
	devDir string
	sysfs  loopdev.Sysfs
	wait   time.Duration
}

func (f *deviceFinder) Find(ctx context.Context, volumeID string, publishContext map[string]string) (string, error) {
	if volumeID == "" || strings.ContainsAny(volumeID, "/\x00") || volumeID == "." || volumeID == ".." {
		return "", fmt.Errorf("%w: volume ID %q cannot name a device", errInvalidParameter, volumeID)
	}
	waitCtx, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	hint := publishContext[PublishDevicePath]
	backoff := deviceBackoffStart
	for {
		dev, err := f.findOnce(volumeID)
		if err != nil {
			return "", err
		}
		if dev != "" {
			klog.V(4).InfoS("Found device", "volume", volumeID, "device", dev, "hint", hint)
			return dev, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-waitCtx.Done():
			t.Stop()
			if err := ctx.Err(); err != nil {
				return "", fmt.Errorf("%w: volume %s (attached as %q): %w", errDeviceNotFound, volumeID, hint, err)
			}
			return "", fmt.Errorf("%w: volume %s (attached as %q) has no device after %s", errDeviceNotFound,
				volumeID, hint, f.wait)
		case <-t.C:
		}
		backoff = min(2*backoff, deviceBackoffMax)
	}
}

func (f *deviceFinder) Lookup(volumeID string) (string, error) {
	if err := checkVolumeID(volumeID); err != nil {
		return "", fmt.Errorf("%w: %v", errInvalidParameter, err)
	}
	return f.findOnce(volumeID)
}

func (f *deviceFinder) Owns(volumeID string, rdev uint64) (bool, error) {
	name, err := kernelDeviceName(rdev)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // not a block device (a tmpfs, the root filesystem...) or one that is gone
	}
	if err != nil {
		return false, err
	}
	if isLoopName(name) {
		// Deleted and autoclear devices count: after a forced detach the mount is still the volume's to undo.
		d, bound, err := f.sysfs.Read(name)
		return err == nil && bound && filepath.Base(d.Backing) == volumeID+".img", err
	}
	return f.ebsSerialIs(name, volumeID)
}

// ebsSerialIs reports whether the kernel block device name (nvme1n1) has the volume's EBS serial.
func (f *deviceFinder) ebsSerialIs(name, volumeID string) (bool, error) {
	sysRoot := f.sysfs.Root
	if sysRoot == "" {
		sysRoot = loopdev.DefaultRoot
	}
	raw, err := os.ReadFile(filepath.Join(sysRoot, name, "device", "serial"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("serial of %s for volume %s: %w", name, volumeID, err)
	}
	return strings.TrimSpace(string(raw)) == ebsSerial(volumeID), nil
}

// ebsSerial is the NVMe serial of an EBS volume: its ID without the dash.
func ebsSerial(volumeID string) string { return strings.ReplaceAll(volumeID, "-", "") }

// findOnce returns the device node, or "" when none is there yet. Errors are ones waiting will not fix.
func (f *deviceFinder) findOnce(volumeID string) (string, error) {
	if dev, err := f.findLoop(volumeID); dev != "" || err != nil {
		return dev, err
	}
	return f.findEBS(volumeID)
}

// findLoop finds the live loop device backed by <volumeID>.img and makes sure DevDir has a node for it.
func (f *deviceFinder) findLoop(volumeID string) (string, error) {
	d, ok, err := f.sysfs.FindByBackingBase(volumeID + ".img")
	if err != nil || !ok {
		return "", err
	}
	node, err := f.sysfs.EnsureDeviceNode(d, f.devDir)
	if err != nil {
		return "", fmt.Errorf("device node of %s for volume %s: %w", d.Name, volumeID, err)
	}
	// An existing node is taken as it is by EnsureDeviceNode: check it is the device sysfs describes.
	major, minor, err := f.sysfs.DevNumbers(d)
	if err != nil {
		return "", err
	}
	rdev, isBlock, err := blockDevice(node)
	if err != nil {
		return "", err
	}
	if !isBlock || rdev != unix.Mkdev(major, minor) {
		return "", fmt.Errorf("%s is not the block device %d:%d of %s (volume %s)", node, major, minor, d.Name, volumeID)
	}
	// The device may have been released and rebound to another file meanwhile.
	now, bound, err := f.sysfs.Read(d.Name)
	if err != nil || !bound || !now.Live() || now.Backing != d.Backing {
		return "", err
	}
	return node, nil
}

// findEBS follows the by-id link of an EBS volume and checks the NVMe serial of the device it points at.
func (f *deviceFinder) findEBS(volumeID string) (string, error) {
	link := filepath.Join(f.devDir, "disk", "by-id", ebsNVMePrefix+ebsSerial(volumeID))
	dev, err := filepath.EvalSymlinks(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", link, err)
	}
	if _, isBlock, err := blockDevice(dev); err != nil || !isBlock {
		return "", err
	}
	ok, err := f.ebsSerialIs(filepath.Base(dev), volumeID)
	if err != nil {
		return "", err
	}
	if !ok {
		// A stale link: udev has not caught up with a device that was reused. Wait for it to be fixed.
		klog.InfoS("Device link names another volume, waiting", "link", link, "device", dev)
		return "", nil
	}
	return dev, nil
}

// blockDevice stats path and reports its device number when it is a block device.
func blockDevice(path string) (rdev uint64, isBlock bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Rdev, st.Mode&unix.S_IFMT == unix.S_IFBLK, nil
}

// deviceSize is the size in bytes of the block device at path (BLKGETSIZE64).
func deviceSize(path string) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", path, err)
	}
	return int64(size), nil
}
