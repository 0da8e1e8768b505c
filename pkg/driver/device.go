package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
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

// deviceFinder finds a volume's device in three ways, the first two by what the kernel says about the device:
//
//   - fakecloud's loop devices, by their backing file (<volumeID>.img);
//   - EBS NVMe devices (Nitro instances), by the by-id link, checked against the device's serial;
//   - on Xen instances (m4, c4, t2...) EBS volumes are /dev/xvdX (or /dev/sdX), with no serial: the device is
//     the one the publish context names (PublishDevicePath), used only when it checks out: at least the size
//     the volume had when it was published (PublishVolumeSize; volumes only grow), not a partition, not a loop
//     or NVMe device (those say whose they are, and it would have been found above), and held by no mount,
//     bind, partition mount or holder unless this boot's record says the volume is staged from it (its mounts
//     are then the volume's own staging and publications). Stage records the device (nodeState), so that calls without a publish
//     context find it and recognise its mounts; the record goes at unstage.
//
// A name alone is never trusted: the publish context can be stale, and /dev entries can point at another
// volume's device.
type deviceFinder struct {
	devDir string
	sys    sysfsView
	wait   time.Duration
	host   host
	state  *nodeState
	boot   string
}

func (f *deviceFinder) Find(ctx context.Context, volumeID string, publishContext map[string]string) (string, error) {
	if volumeID == "" || strings.ContainsAny(volumeID, "/\x00") || volumeID == "." || volumeID == ".." {
		return "", fmt.Errorf("%w: volume ID %q cannot name a device", errInvalidParameter, volumeID)
	}
	waitCtx, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	hint := publishContext[PublishDevicePath]
	named := parseNamedDevice(publishContext)
	backoff := deviceBackoffStart
	var refused error // why the named device was not taken, for the final error
	for {
		dev, err := f.findOnce(volumeID)
		if err != nil {
			return "", err
		}
		if dev == "" && named.ok() {
			if dev, refused, err = f.findNamed(volumeID, named); err != nil {
				return "", err
			}
		}
		if dev != "" {
			klog.V(4).InfoS("Found device", "volume", volumeID, "device", dev, "hint", hint)
			return dev, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-waitCtx.Done():
			t.Stop()
			why := ""
			if refused != nil {
				why = ": " + refused.Error()
			}
			if err := ctx.Err(); err != nil {
				return "", fmt.Errorf("%w: volume %s (attached as %q)%s: %w", errDeviceNotFound, volumeID, hint, why, err)
			}
			return "", fmt.Errorf("%w: volume %s (attached as %q) has no device after %s%s", errDeviceNotFound,
				volumeID, hint, f.wait, why)
		case <-t.C:
		}
		backoff = min(2*backoff, deviceBackoffMax)
	}
}

func (f *deviceFinder) Lookup(volumeID string) (string, error) {
	if err := checkVolumeID(volumeID); err != nil {
		return "", fmt.Errorf("%w: %v", errInvalidParameter, err)
	}
	dev, err := f.findOnce(volumeID)
	if dev != "" || err != nil {
		return dev, err
	}
	d, ok, err := f.state.stagedDevice(volumeID, f.boot)
	if err != nil || !ok {
		return "", err
	}
	// The recorded device must still be there under its name, and still have no identity of another volume.
	rdev, isBlock, err := f.host.blockDevice(d.path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && (!isBlock || rdev != d.rdev) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if id, err := f.identity(rdev); err != nil || id.kind != anonymous && id.volumeID != volumeID {
		return "", err
	}
	return d.path, nil
}

func (f *deviceFinder) Owns(volumeID string, rdev uint64) (bool, error) {
	id, err := f.identity(rdev)
	if err != nil || id.kind == noDevice {
		return false, err
	}
	if id.kind != anonymous {
		// Deleted and autoclear loop devices count: after a forced detach the mount is still the volume's to undo.
		return id.volumeID == volumeID, nil
	}
	d, ok, err := f.state.stagedDevice(volumeID, f.boot)
	return ok && d.rdev == rdev, err
}

// Kinds of device identity.
const (
	noDevice  = iota // the kernel knows no block device by that number (a tmpfs, the root filesystem, gone)
	loop             // a loop device; volumeID from its backing file ("" for another file)
	ebsNVMe          // an NVMe device; volumeID from its EBS serial ("" for another serial)
	partition        // a partition: never a volume's device (volumes are whole disks)
	anonymous        // a whole disk that does not say whose it is (Xen's xvdX, SCSI)
)

// deviceIdentity is what the kernel says about a device: its name, kind, and for loop and NVMe devices the
// volume it serves.
type deviceIdentity struct {
	name     string
	kind     int
	volumeID string
}

// identity reads the block device numbered rdev's identity from sysfs.
func (f *deviceFinder) identity(rdev uint64) (deviceIdentity, error) {
	name, err := f.sys.kernelName(rdev)
	if errors.Is(err, fs.ErrNotExist) {
		return deviceIdentity{kind: noDevice}, nil
	}
	if err != nil {
		return deviceIdentity{}, err
	}
	if isLoopName(name) {
		id := deviceIdentity{name: name, kind: loop}
		d, bound, err := f.sys.block.Read(name)
		if base := filepath.Base(d.Backing); bound && strings.HasSuffix(base, ".img") {
			id.volumeID = strings.TrimSuffix(base, ".img")
		}
		return id, err
	}
	if _, err := f.sys.attr(rdev, "partition"); err == nil {
		return deviceIdentity{name: name, kind: partition}, nil
	}
	serial, ok, err := f.sys.serial(name)
	if err != nil || !ok {
		return deviceIdentity{name: name, kind: anonymous}, err
	}
	id := deviceIdentity{name: name, kind: ebsNVMe}
	if rest, ok := strings.CutPrefix(serial, "vol"); ok && rest != "" {
		id.volumeID = "vol-" + rest // see ebsSerial
	}
	return id, nil
}

// describe says whose a device with an identity is, for messages.
func (id deviceIdentity) describe() string {
	what := map[int]string{loop: "loop device", ebsNVMe: "NVMe device", partition: "partition"}[id.kind]
	if id.volumeID == "" {
		return fmt.Sprintf("%s %s of no volume", what, id.name)
	}
	return fmt.Sprintf("%s %s of volume %s", what, id.name, id.volumeID)
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
	s := f.sys.block
	d, ok, err := s.FindByBackingBase(volumeID + ".img")
	if err != nil || !ok {
		return "", err
	}
	node, err := s.EnsureDeviceNode(d, f.devDir)
	if err != nil {
		return "", fmt.Errorf("device node of %s for volume %s: %w", d.Name, volumeID, err)
	}
	// An existing node is taken as it is by EnsureDeviceNode: check it is the device sysfs describes.
	major, minor, err := s.DevNumbers(d)
	if err != nil {
		return "", err
	}
	rdev, isBlock, err := f.host.blockDevice(node)
	if err != nil {
		return "", err
	}
	if !isBlock || rdev != unix.Mkdev(major, minor) {
		return "", fmt.Errorf("%s is not the block device %d:%d of %s (volume %s)", node, major, minor, d.Name, volumeID)
	}
	// The device may have been released and rebound to another file meanwhile.
	now, bound, err := s.Read(d.Name)
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
	rdev, isBlock, err := f.host.blockDevice(dev)
	if err != nil || !isBlock {
		return "", err
	}
	id, err := f.identity(rdev)
	if err != nil {
		return "", err
	}
	if id.kind != ebsNVMe || id.volumeID != volumeID {
		// A stale link: udev has not caught up with a device that was reused. Wait for it to be fixed.
		klog.InfoS("Device link names another volume, waiting", "link", link, "device", dev)
		return "", nil
	}
	return dev, nil
}

// xenDeviceName is a device name EC2 accepts for an EBS attachment, as the publish context carries it:
// /dev/xvdX or its alias /dev/sdX, X one or two letters.
var xenDeviceName = regexp.MustCompile(`^/dev/(?:xvd|sd)([a-z]{1,2})$`)

// namedDevice is what the publish context says of the volume's device: its name's letters and the volume's
// size at publish.
type namedDevice struct {
	letters string
	minSize int64
}

func (d namedDevice) ok() bool { return d.letters != "" && d.minSize > 0 }

// parseNamedDevice reads the publish context; a name or size of another shape is ignored (the zero value):
// the device is then found by identity only.
func parseNamedDevice(publishContext map[string]string) namedDevice {
	m := xenDeviceName.FindStringSubmatch(publishContext[PublishDevicePath])
	size, err := strconv.ParseInt(publishContext[PublishVolumeSize], 10, 64)
	if m == nil || err != nil || size <= 0 {
		return namedDevice{}
	}
	return namedDevice{letters: m[1], minSize: size}
}

// findNamed looks for the device the publish context names, as xvdX and as sdX under DevDir, and returns the
// first that checks out (see deviceFinder), recording it for later calls. refused says why a device that is
// there was not taken; err is for errors waiting will not fix.
func (f *deviceFinder) findNamed(volumeID string, named namedDevice) (dev string, refused, err error) {
	for _, prefix := range []string{"xvd", "sd"} {
		path := filepath.Join(f.devDir, prefix+named.letters)
		rdev, isBlock, err := f.host.blockDevice(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if !isBlock {
			refused = fmt.Errorf("%s is not a block device", path)
			continue
		}
		why, err := f.checkNamed(volumeID, path, rdev, named.minSize)
		if err != nil {
			return "", nil, err
		}
		if why != "" {
			refused = fmt.Errorf("%s is not the volume's device: %s", path, why)
			klog.InfoS("Device named by the publish context refused", "volume", volumeID, "device", path, "reason", why)
			continue
		}
		if err := f.state.recordStagedDevice(volumeID, f.boot, stagedDevice{path: path, rdev: rdev}); err != nil {
			return "", nil, fmt.Errorf("record device %s of volume %s: %w", path, volumeID, err)
		}
		return path, nil, nil
	}
	return "", refused, nil
}

// checkNamed says why the device at path (numbered rdev), named by the publish context, is not the volume's;
// "" when it is.
func (f *deviceFinder) checkNamed(volumeID, path string, rdev uint64, minSize int64) (why string, err error) {
	id, err := f.identity(rdev)
	if err != nil {
		return "", err
	}
	switch id.kind {
	case noDevice:
		return "the kernel lists no block device " + devID(rdev), nil
	case partition:
		return "it is the partition " + id.name, nil
	case loop, ebsNVMe:
		if id.kind == ebsNVMe && id.volumeID == volumeID {
			return "", nil // the by-id link is missing, the serial says it is ours
		}
		// A device that says whose it is would have been found above if it were this volume's (live).
		return "it is the " + id.describe(), nil
	}
	size, err := f.host.deviceSize(path)
	if err != nil {
		return "", err
	}
	if size < minSize {
		return fmt.Sprintf("it has %d bytes, the volume had %d when it was published", size, minSize), nil
	}
	if d, ok, err := f.state.stagedDevice(volumeID, f.boot); err != nil || ok && d.rdev == rdev {
		return "", err // staged from it in this boot: its mounts are the volume's
	}
	return f.inUse(id.name, rdev, filepath.Base(path))
}

// inUse says what holds the device (named name, numbered rdev, its node named base): a mount of it or of one
// of its partitions, a bind of its node, a holder (device mapper, md); "" when nothing does.
func (f *deviceFinder) inUse(name string, rdev uint64, base string) (string, error) {
	devs := []uint64{rdev}
	entries, err := os.ReadDir(filepath.Join(f.sys.blockRoot(), name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), name) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(f.sys.blockRoot(), name, e.Name(), "dev"))
		var major, minor uint32
		if err == nil {
			if _, err := fmt.Sscanf(strings.TrimSpace(string(raw)), "%d:%d", &major, &minor); err == nil {
				devs = append(devs, unix.Mkdev(major, minor))
			}
		}
	}
	for _, d := range devs {
		mounts, err := mountsOfDevice(f.host, d)
		if err != nil {
			return "", err
		}
		if len(mounts) > 0 {
			return fmt.Sprintf("%s (%s) is mounted at %s", mounts[0].Source, devID(d), mounts[0].Mountpoint), nil
		}
	}
	binds, err := deviceBindMounts(f.host, rdev, base)
	if err != nil {
		return "", err
	}
	if len(binds) > 0 {
		return "its device node is bound at " + binds[0], nil
	}
	holders, err := os.ReadDir(filepath.Join(f.sys.blockRoot(), name, "holders"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if len(holders) > 0 {
		return "it is held by " + holders[0].Name(), nil
	}
	return "", nil
}
