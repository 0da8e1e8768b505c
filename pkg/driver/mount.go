package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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

// sysDevBlock maps "major:minor" to the kernel's block devices.
const sysDevBlock = "/sys/dev/block"

// maxUnmounts bounds how many stacked mounts one unmount call peels off a path.
const maxUnmounts = 8

// mountAt returns the topmost mount on path (symlinks resolved, as the kernel lists it). A missing path is
// fs.ErrNotExist.
func mountAt(path string) (*mountinfo.Info, bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, false, err
	}
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(real))
	if err != nil || len(infos) == 0 {
		return nil, false, err
	}
	// Later lines are mounted on top of earlier ones.
	return infos[len(infos)-1], true, nil
}

// mountsOfDevice lists the mount points of the filesystem on device number dev.
func mountsOfDevice(dev uint64) ([]*mountinfo.Info, error) {
	return mountinfo.GetMounts(func(mi *mountinfo.Info) (skip, stop bool) { return mountDev(mi) != dev, false })
}

// deviceBindMounts lists paths where the device node with number rdev (named base) is bind-mounted.
func deviceBindMounts(rdev uint64, base string) ([]string, error) {
	infos, err := mountinfo.GetMounts(func(mi *mountinfo.Info) (skip, stop bool) { return filepath.Base(mi.Root) != base, false })
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range infos {
		p := mi.Mountpoint
		if r, isBlock, err := blockDevice(p); err == nil && isBlock && r == rdev {
			out = append(out, p)
		}
	}
	return out, nil
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
		_, mounted, err := volumeMountAt(path, n.owns(volumeID))
		if errors.Is(err, fs.ErrNotExist) || err == nil && !mounted {
			return unmounted, nil
		}
		if err != nil {
			return unmounted, err
		}
		if err := n.mounter.Unmount(path); err != nil {
			return unmounted, fmt.Errorf("unmount %s: %w", path, err)
		}
		unmounted = true
	}
	return unmounted, fmt.Errorf("%s is still mounted after %d unmounts", path, maxUnmounts)
}

// deviceProblem describes why the block device dev can no longer serve I/O, or returns "" when it can. reason
// is CamelCase for VolumeHealth.
func (n *NodeServer) deviceProblem(dev uint64) (reason, message string) {
	id := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	name, err := kernelDeviceName(dev)
	if err != nil {
		return "DeviceGone", fmt.Sprintf("block device %s is gone: %v", id, err)
	}
	if isLoopName(name) {
		if d, bound, err := n.opts.Sysfs.Read(name); err == nil {
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
	raw, err := os.ReadFile(filepath.Join(sysDevBlock, id, "size"))
	if err == nil && strings.TrimSpace(string(raw)) == "0" {
		return "DeviceEmpty", fmt.Sprintf("block device %s (%s) has no capacity", name, id)
	}
	return "", ""
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
