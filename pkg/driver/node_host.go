package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/diskforge/diskforge/pkg/blkprobe"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// host is what the node service asks of the machine it runs on: the mount table, mounts, block devices, the
// filesystem tools. The node's rules (which device is the volume's, which mount may be used, undone or
// reported on, when a device may be formatted) are written against it, so that tests can check them on a fake
// machine with a mount table and devices in memory; realHost is the kernel and the tools. Sysfs is read
// through sysfsView, whose root a test points at a tree of its own.
type host interface {
	// mounts lists the mount table's entries that filter keeps (nil: all), in mount order: a later entry on a
	// mount point is mounted on top of an earlier one.
	mounts(filter mountinfo.FilterFunc) ([]*mountinfo.Info, error)
	// mount mounts source on target: fsType's filesystem on a device, or a bind ("bind" in opts, fsType "").
	mount(source, target, fsType string, opts []string) error
	// unmount unmounts the topmost mount on target.
	unmount(target string) error

	// blockDevice stats path (following symlinks) and reports its device number when it is a block device.
	// A missing path is an error wrapping fs.ErrNotExist.
	blockDevice(path string) (rdev uint64, isBlock bool, err error)
	// deviceSize is the size in bytes of the block device at path.
	deviceSize(path string) (int64, error)
	// deviceCondition says why the block device numbered rdev cannot serve I/O ("" when it can): its reason
	// is CamelCase, for VolumeHealth.
	deviceCondition(ctx context.Context, rdev uint64) (reason, message string)

	// probe reads what blkid would read of dev (blkprobe.Probe).
	probe(dev string) (blkprobe.Result, error)
	// diskFormat is what blkid -p finds on dev: a filesystem or partition table type, "" for nothing.
	diskFormat(dev string) (string, error)
	// xfsInProgress reports whether dev's primary XFS superblock is still marked in progress (sb_inprogress):
	// mkfs.xfs writes it so first and clears it last, and the kernel refuses to mount it.
	xfsInProgress(dev string) (bool, error)
	// blkidVersion is the output of blkid -V.
	blkidVersion() (string, error)
	// format runs mkfs.fsType with args, then dev.
	format(dev, fsType string, args []string) error
	// mkfsXFSKnows reports whether the installed mkfs.xfs takes the option flag name=0 (flag "-m" or "-i").
	mkfsXFSKnows(flag, name string) (bool, error)
	// repair checks an existing filesystem before it is mounted read-write (fsck -a), as mount-utils does.
	repair(dev string) error
	// growFS grows the filesystem on dev (mounted at mountPoint; "" for an unmounted ext4) to the device's
	// size when the device is larger by a block or more, and returns the filesystem's size.
	growFS(ctx context.Context, fsType, dev, mountPoint string) (int64, error)
	// statfs reports the filesystem mounted at path.
	statfs(path string) (unix.Statfs_t, error)

	// bootID names this boot of the machine: what was true of its devices in another boot is not now.
	bootID() (string, error)
	// sysfs is where the kernel describes the machine's block devices.
	sysfs() sysfsView
}

// realHost is the machine itself: the kernel (mountinfo, stat, ioctls, sysfs) and the tools mount-utils runs.
type realHost struct {
	mounter *mount.SafeFormatAndMount
	sys     sysfsView
	devDir  string
}

func (h *realHost) mounts(filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	return mountinfo.GetMounts(filter)
}

func (h *realHost) mount(source, target, fsType string, opts []string) error {
	return h.mounter.MountSensitive(source, target, fsType, opts, nil)
}

func (h *realHost) unmount(target string) error { return h.mounter.Unmount(target) }

func (h *realHost) blockDevice(path string) (uint64, bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Rdev, st.Mode&unix.S_IFMT == unix.S_IFBLK, nil
}

func (h *realHost) deviceSize(path string) (int64, error) {
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

func (h *realHost) probe(dev string) (blkprobe.Result, error) { return blkprobe.Probe(dev) }

func (h *realHost) diskFormat(dev string) (string, error) { return h.mounter.GetDiskFormat(dev) }

// The primary XFS superblock (struct xfs_dsb) starts the device: its magic, and sb_inprogress at offset 126.
const (
	xfsMagic            = "XFSB"
	xfsInProgressOffset = 126
)

func (h *realHost) xfsInProgress(dev string) (bool, error) {
	f, err := os.Open(dev)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sb := make([]byte, 512)
	if _, err := io.ReadFull(f, sb); err != nil {
		return false, fmt.Errorf("read the XFS superblock of %s: %w", dev, err)
	}
	return string(sb[:len(xfsMagic)]) == xfsMagic && sb[xfsInProgressOffset] != 0, nil
}

func (h *realHost) blkidVersion() (string, error) {
	out, err := h.mounter.Exec.Command("blkid", "-V").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("blkid -V: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (h *realHost) format(dev, fsType string, args []string) error {
	args = append(args[:len(args):len(args)], dev)
	if out, err := h.mounter.Exec.Command("mkfs."+fsType, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.%s %s: %w: %s", fsType, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mkfsXFSKnows runs mkfs.xfs -N with the option and no device: it parses its options before it looks for a
// device, so it names an option it does not know ("unknown option -m bigtime=0") and otherwise stops at the
// missing device, writing nothing either way. The C locale keeps the message untranslated.
func (h *realHost) mkfsXFSKnows(flag, name string) (bool, error) {
	cmd := h.mounter.Exec.Command("mkfs.xfs", "-N", flag, name+"=0")
	cmd.SetEnv(append(os.Environ(), "LC_ALL=C"))
	out, err := cmd.CombinedOutput()
	var ee utilexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return false, fmt.Errorf("mkfs.xfs -N %s %s=0: %w", flag, name, err)
	}
	return !strings.Contains(string(out), "unknown option"), nil
}

// fsck's exit codes (fsck(8)).
const (
	fsckErrorsCorrected   = 1
	fsckErrorsUncorrected = 4
)

// repair runs fsck -a as mount-utils' FormatAndMount does before a read-write mount: corrected errors are
// fine, uncorrected ones refuse the mount, and anything else (no fsck, an fsck that cannot run) is logged.
func (h *realHost) repair(dev string) error {
	out, err := h.mounter.Exec.Command("fsck", "-a", dev).CombinedOutput()
	if err == nil {
		return nil
	}
	var ee utilexec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitStatus() == fsckErrorsCorrected:
		klog.InfoS("fsck corrected errors", "device", dev)
	case errors.As(err, &ee) && ee.ExitStatus() == fsckErrorsUncorrected:
		return fmt.Errorf("fsck -a %s found errors it could not correct: %s", dev, strings.TrimSpace(string(out)))
	default:
		klog.InfoS("fsck did not check the filesystem; mounting it anyway", "device", dev, "err", err, "output", strings.TrimSpace(string(out)))
	}
	return nil
}

func (h *realHost) statfs(path string) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return st, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return st, nil
}

func (h *realHost) sysfs() sysfsView { return h.sys }

// bootIDFile is the kernel's random ID of the current boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

func (h *realHost) bootID() (string, error) {
	raw, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(raw)), nil
}

// sysDevBlock maps "major:minor" to the kernel's block devices.
const sysDevBlock = "/sys/dev/block"

// sysfsView reads what the kernel says of block devices: loop bindings and attributes under block.Root
// (/sys/block), device numbers to names under devBlock (/sys/dev/block).
type sysfsView struct {
	block    loopdev.Sysfs
	devBlock string
}

// newSysfsView reads block devices from block.Root (/sys/block when empty) and device numbers from the
// dev/block directory beside it.
func newSysfsView(block loopdev.Sysfs) sysfsView {
	if block.Root == "" {
		return sysfsView{block: block, devBlock: sysDevBlock}
	}
	return sysfsView{block: block, devBlock: filepath.Join(filepath.Dir(block.Root), "dev", "block")}
}

// kernelName is the kernel's name ("loop3", "nvme1n1", "xvdba") of the block device numbered rdev. A device
// the kernel does not know is fs.ErrNotExist.
func (s sysfsView) kernelName(rdev uint64) (string, error) {
	link, err := os.Readlink(filepath.Join(s.devBlock, devID(rdev)))
	if err != nil {
		return "", err
	}
	return filepath.Base(link), nil
}

// attr reads one sysfs attribute of the block device numbered rdev (a file under /sys/dev/block/M:m).
func (s sysfsView) attr(rdev uint64, name string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(s.devBlock, devID(rdev), name))
	return strings.TrimSpace(string(raw)), err
}

// serial is the NVMe serial of the named device; ok is false for a device without one (Xen, SCSI, loop).
func (s sysfsView) serial(name string) (serial string, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(s.blockRoot(), name, "device", "serial"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("serial of %s: %w", name, err)
	}
	return strings.TrimSpace(string(raw)), true, nil
}

func (s sysfsView) blockRoot() string {
	if s.block.Root == "" {
		return loopdev.DefaultRoot
	}
	return s.block.Root
}

// devID is "major:minor", as sysfs and mountinfo name a device.
func devID(rdev uint64) string { return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)) }
