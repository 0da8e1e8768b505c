package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mounts are read from /proc/self/mountinfo (moby/sys/mountinfo parses and unescapes it): unlike /proc/mounts
// it has device numbers, and a bind mount of a device node and a mount from a node in a scratch /dev are only
// comparable by device number.

// maxUnmounts bounds how many stacked mounts one unmount call peels off a path.
const maxUnmounts = 8

// mountAt returns the topmost mount on path (symlinks resolved, as the kernel lists it). A missing path is
// fs.ErrNotExist.
func mountAt(h host, path string) (*mountinfo.Info, bool, error) {
	real, err := resolveMountPoint(path)
	if err != nil {
		return nil, false, err
	}
	infos, err := h.mounts(mountinfo.SingleEntryFilter(real))
	if err != nil || len(infos) == 0 {
		return nil, false, err
	}
	// Later lines are mounted on top of earlier ones.
	return infos[len(infos)-1], true, nil
}

// resolveMountPoint resolves symlinks in path. The root of a filesystem the kernel shut down (XFS after a log
// write failed) answers lstat with EIO; the path is then resolved through its parent, whose filesystem is
// healthy, and taken as is: a symlink would have answered lstat from the parent's filesystem. Without this, a
// shut-down filesystem could be neither reported nor unmounted.
func resolveMountPoint(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if !errors.Is(err, unix.EIO) {
		return real, err
	}
	parent, perr := filepath.EvalSymlinks(filepath.Dir(path))
	if perr != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(path)), nil
}

// mountsOfDevice lists the mount points of the filesystem on device number dev.
func mountsOfDevice(h host, dev uint64) ([]*mountinfo.Info, error) {
	return h.mounts(func(mi *mountinfo.Info) (skip, stop bool) { return mountDev(mi) != dev, false })
}

// deviceBindMounts lists paths where the device node with number rdev (named base) is bind-mounted.
func deviceBindMounts(h host, rdev uint64, base string) ([]string, error) {
	infos, err := h.mounts(func(mi *mountinfo.Info) (skip, stop bool) { return filepath.Base(mi.Root) != base, false })
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range infos {
		p := mi.Mountpoint
		if r, isBlock, err := h.blockDevice(p); err == nil && isBlock && r == rdev {
			out = append(out, p)
		}
	}
	return out, nil
}

// mountedDevice is the device a mount on path serves: for the bind mount of a device node (a published block
// volume) the node's device, else the mounted filesystem's device.
func mountedDevice(h host, mi *mountinfo.Info, path string) uint64 {
	if rdev, isBlock, err := h.blockDevice(path); err == nil && isBlock {
		return rdev
	}
	return mountDev(mi)
}

func mountDev(mi *mountinfo.Info) uint64 { return unix.Mkdev(uint32(mi.Major), uint32(mi.Minor)) }

func readOnlyMount(mi *mountinfo.Info) bool {
	return slices.Contains(strings.Split(mi.Options, ","), "ro")
}

// unmountVolume unmounts the volume's mounts from path, topmost first, until none is left; a missing or
// unmounted path is fine. A mount of another device is errForeignPath and stays, with whatever is under it.
// unmounted reports whether this call unmounted anything.
func (n *NodeServer) unmountVolume(volumeID, path string) (unmounted bool, err error) {
	for range maxUnmounts {
		_, mounted, err := volumeMountAt(n.host, path, n.owns(volumeID))
		if errors.Is(err, fs.ErrNotExist) || err == nil && !mounted {
			return unmounted, nil
		}
		if err != nil {
			return unmounted, err
		}
		if err := n.host.unmount(path); err != nil {
			return unmounted, fmt.Errorf("unmount %s: %w", path, err)
		}
		unmounted = true
	}
	return unmounted, fmt.Errorf("%s is still mounted after %d unmounts", path, maxUnmounts)
}

// isLoopName reports whether a kernel block device name is a whole loop device ("loop3", not "loop3p1").
func isLoopName(name string) bool {
	rest, ok := strings.CutPrefix(name, "loop")
	if !ok || rest == "" {
		return false
	}
	_, err := strconv.Atoi(rest)
	return err == nil
}
