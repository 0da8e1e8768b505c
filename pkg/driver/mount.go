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

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// procMountInfo lists this process's mounts with their device numbers, which /proc/mounts lacks: a bind mount
// of a device node and a mount from a node in a scratch /dev are only comparable by device number.
const procMountInfo = "/proc/self/mountinfo"

// sysDevBlock maps "major:minor" to the kernel's block devices.
const sysDevBlock = "/sys/dev/block"

// maxUnmounts bounds how many stacked mounts one unmount call peels off a path.
const maxUnmounts = 8

// mountAt returns the topmost mount on path (symlinks resolved, as the kernel lists it). A missing path is
// fs.ErrNotExist.
func mountAt(path string) (mount.MountInfo, bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return mount.MountInfo{}, false, err
	}
	infos, err := mount.ParseMountInfo(procMountInfo)
	if err != nil {
		return mount.MountInfo{}, false, err
	}
	var top mount.MountInfo
	found := false
	// Later lines are mounted on top of earlier ones.
	for _, mi := range infos {
		if unescapeMountPath(mi.MountPoint) == real {
			top, found = mi, true
		}
	}
	return top, found, nil
}

// mountsOfDevice lists the mount points of the filesystem on device number dev.
func mountsOfDevice(dev uint64) ([]mount.MountInfo, error) {
	infos, err := mount.ParseMountInfo(procMountInfo)
	if err != nil {
		return nil, err
	}
	var out []mount.MountInfo
	for _, mi := range infos {
		if mountDev(mi) == dev {
			out = append(out, mi)
		}
	}
	return out, nil
}

// deviceBindMounts lists paths where the device node with number rdev (named base) is bind-mounted.
func deviceBindMounts(rdev uint64, base string) ([]string, error) {
	infos, err := mount.ParseMountInfo(procMountInfo)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range infos {
		if filepath.Base(unescapeMountPath(mi.Root)) != base {
			continue
		}
		p := unescapeMountPath(mi.MountPoint)
		if r, isBlock, err := blockDevice(p); err == nil && isBlock && r == rdev {
			out = append(out, p)
		}
	}
	return out, nil
}

func mountDev(mi mount.MountInfo) uint64 { return unix.Mkdev(uint32(mi.Major), uint32(mi.Minor)) }

func readOnlyMount(mi mount.MountInfo) bool { return slices.Contains(mi.MountOptions, "ro") }

// unescapeMountPath undoes the octal escapes (\040 for a space) of mountinfo paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts path until nothing is mounted on it; a missing path is fine.
func (n *NodeServer) unmountAll(path string) error {
	for range maxUnmounts {
		_, mounted, err := mountAt(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !mounted {
			return nil
		}
		if err != nil {
			return err
		}
		if err := n.mounter.Unmount(path); err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("%s is still mounted after %d unmounts", path, maxUnmounts)
}

// deviceProblem describes why the block device dev can no longer serve I/O, or returns "" when it can. reason
// is CamelCase for VolumeHealth.
func (n *NodeServer) deviceProblem(dev uint64) (reason, message string) {
	id := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	link, err := os.Readlink(filepath.Join(sysDevBlock, id))
	if err != nil {
		return "DeviceGone", fmt.Sprintf("block device %s is gone: %v", id, err)
	}
	name := filepath.Base(link)
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
