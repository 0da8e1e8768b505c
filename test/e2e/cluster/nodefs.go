package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// A lost machine's disks keep what was synced and nothing more; a rebooted one has no mounts. The node's mounts
// live in its mount namespace (held by its containerd), so the harness does both by hand.

// volumeDirs hold the node's volume mounts: kubelet's pod volume directories and the plugins' staging paths.
var volumeDirs = []string{"/var/lib/kubelet/pods/", "/var/lib/kubelet/plugins/"}

// fsShutdown is FS_IOC_SHUTDOWN (ext4's EXT4_IOC_SHUTDOWN, xfs's XFS_IOC_GOINGDOWN: _IOR('X', 125, __u32)), and
// fsShutdownNoLogFlush its flag that flushes neither data nor journal: a crash.
const (
	fsShutdown           = 0x8004587d
	fsShutdownNoLogFlush = 2
)

// shutdownFilesystems lists the filesystems that support a shutdown.
var shutdownFilesystems = []string{"ext4", "ext3", "ext2", "xfs"}

// nodeVolumeMounts are the mounts of the node (a process in its mount namespace) below volumeDirs, parents before
// children.
func nodeVolumeMounts(pid int) ([]*mountinfo.Info, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (skip, stop bool) {
		return !underVolumeDirs(m.Mountpoint), false
	})
}

func underVolumeDirs(path string) bool {
	return slices.ContainsFunc(volumeDirs, func(d string) bool { return strings.HasPrefix(path, d) })
}

// volumeFilesystems picks one mount point per block-device filesystem that can be shut down (a staging mount and
// its bind mounts share one filesystem).
func volumeFilesystems(mounts []*mountinfo.Info) []string {
	seen := map[[2]int]bool{}
	var points []string
	for _, m := range mounts {
		if !strings.HasPrefix(m.Source, "/dev/") || !slices.Contains(shutdownFilesystems, m.FSType) {
			continue
		}
		dev := [2]int{m.Major, m.Minor}
		if seen[dev] {
			continue
		}
		seen[dev] = true
		points = append(points, m.Mountpoint)
	}
	return points
}

// shutdownVolumeFilesystems shuts down, without any flush, the filesystems mounted below the node's volume
// directories; it returns how many.
func shutdownVolumeFilesystems(pid int) (int, error) {
	mounts, err := nodeVolumeMounts(pid)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, point := range volumeFilesystems(mounts) {
		if err := shutdownFS(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), point)); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// shutdownFS shuts down the filesystem mounted at dir: from then on it neither reads nor writes its device (EIO),
// unmounting included. One already shut down stays so.
func shutdownFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EIO) {
		return nil // already shut down
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetPointerInt(fd, fsShutdown, fsShutdownNoLogFlush); err != nil && !errors.Is(err, unix.EIO) {
		return fmt.Errorf("shut down %s: %w", dir, err)
	}
	return nil
}

// dropNodeMounts detaches every mount below the node's volume directories (umount -l in its namespace, children
// first), as a reboot loses them; it returns how many there were.
func dropNodeMounts(ctx context.Context, pid int) (int, error) {
	mounts, err := nodeVolumeMounts(pid)
	if err != nil || len(mounts) == 0 {
		return 0, err
	}
	args := []string{"--mount=/proc/" + strconv.Itoa(pid) + "/ns/mnt", "--", "umount", "-l"}
	for i := len(mounts) - 1; i >= 0; i-- {
		args = append(args, mounts[i].Mountpoint)
	}
	// A child detached with its parent no longer exists: umount's complaints about those do not count; the mounts
	// left afterwards do.
	out, _ := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	left, err := nodeVolumeMounts(pid)
	if err != nil {
		return 0, err
	}
	if len(left) > 0 {
		return 0, fmt.Errorf("%d mounts left after umount -l (%s): first %s", len(left), strings.TrimSpace(string(out)),
			left[0].Mountpoint)
	}
	return len(mounts), nil
}

// releaseNodeLoops releases kubelet's loop devices of the node (a block volume's device kept open by kubelet),
// gone with a reboot: their backing path is below /var/lib/kubelet/ and exists in this node's mount namespace
// (a pod UID's path exists on one node only). It returns how many it released.
func releaseNodeLoops(pid int, logf func(string, ...any)) int {
	devs, err := loopdev.Sysfs{}.List()
	if err != nil {
		logf("list loop devices: %v", err)
		return 0
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	n := 0
	for _, d := range devs {
		if !strings.HasPrefix(d.Backing, "/var/lib/kubelet/") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, d.Backing)); err != nil {
			continue // another node's
		}
		released, err := releaseLoop(d.Path(), func(fileID) bool { return true })
		if err != nil {
			logf("release %s (%s): %v", d.Path(), d.Backing, err)
		} else if released {
			n++
		}
	}
	return n
}
