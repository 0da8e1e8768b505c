//go:build e2e

package scenarios

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// Host checks look at this machine: the kubelets of the local cluster (or of a cluster whose kubelets run here,
// with -host-checks) mount pods' volumes below their root directories, and fakecloud binds volume files to loop
// devices. Pods run on a fake container runtime, so "the pod writes data" is the test writing into the pod's
// volume mount on the host.

// podVolumePath is where kubelet mounts a CSI filesystem volume for a pod.
func podVolumePath(n node, podUID types.UID, pv string) string {
	return filepath.Join(n.RootDir, "pods", string(podUID), "volumes", "kubernetes.io~csi", pv, "mount")
}

// blockPublishPath is the file kubelet asks the driver to publish a block volume of a pod at (NodePublishVolume's
// target path): the driver bind-mounts the device onto it.
func blockPublishPath(n node, pv string, podUID types.UID) string {
	return filepath.Join(n.RootDir, "plugins", "kubernetes.io", "csi", "volumeDevices", "publish", pv, string(podUID))
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev    string // major:minor
	point  string
	fsType string
	source string
}

func (m mountEntry) String() string {
	return fmt.Sprintf("%s (%s, %s on %s)", m.point, m.fsType, m.source, m.dev)
}

// readMounts lists the mounts the node sees: its mount namespace's (local cluster), or this process's.
func readMounts(n node) ([]mountEntry, error) {
	var infos []*mountinfo.Info
	var err error
	if n.Pid == 0 {
		infos, err = mountinfo.GetMounts(nil)
	} else {
		var f *os.File
		if f, err = os.Open(fmt.Sprintf("/proc/%d/mountinfo", n.Pid)); err != nil {
			return nil, err
		}
		defer f.Close()
		infos, err = mountinfo.GetMountsFromReader(f, nil)
	}
	if err != nil {
		return nil, err
	}
	out := make([]mountEntry, 0, len(infos))
	for _, m := range infos {
		out = append(out, mountEntry{dev: fmt.Sprintf("%d:%d", m.Major, m.Minor), point: m.Mountpoint, fsType: m.FSType, source: m.Source})
	}
	return out, nil
}

// onNode is the path at which this process reaches a path of the node's.
func onNode(n node, path string) string {
	if n.Pid == 0 {
		return path
	}
	return fmt.Sprintf("/proc/%d/root%s", n.Pid, path)
}

// mountAt returns the topmost mount at path on the node.
func mountAt(n node, path string) (mountEntry, bool, error) {
	ms, err := readMounts(n)
	if err != nil {
		return mountEntry{}, false, err
	}
	var found mountEntry
	ok := false
	for _, m := range ms {
		if m.point == path {
			found, ok = m, true
		}
	}
	return found, ok, nil
}

// requireMount waits (kubelet has normally mounted before the pod runs) for a mount of fsType at path.
func requireMount(t testing.TB, n node, path, fsType string) mountEntry {
	t.Helper()
	var m mountEntry
	waitFor(t, "mount at "+path, func(context.Context) (bool, string, error) {
		var ok bool
		var err error
		m, ok, err = mountAt(n, path)
		if err != nil || !ok {
			return false, "not mounted", err
		}
		return true, fmt.Sprintf("%s from %s (%s)", m.fsType, m.source, m.dev), nil
	})
	if m.fsType != fsType {
		t.Fatalf("%s is %s, want %s", path, m.fsType, fsType)
	}
	return m
}

// hostDeviceNumber is the major:minor of a loop device fakecloud reports as an attachment's host device.
func hostDeviceNumber(dev string) (string, error) {
	ma, mi, err := loopdev.Sysfs{}.DevNumbers(loopdev.Device{Name: filepath.Base(dev)})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", ma, mi), nil
}

// fsSize is the size of the filesystem mounted at path on the node (statfs: blocks × block size).
func fsSize(n node, path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(onNode(n, path), &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// blockDeviceSize opens path on the node, which must be a block device, and asks its size (BLKGETSIZE64).
func blockDeviceSize(n node, path string) (int64, error) {
	path = onNode(n, path)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, fmt.Errorf("%s is not a block device (mode %o)", path, st.Mode)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", path, err)
	}
	return int64(size), nil
}

// dataFile is what a scenario wrote into a volume, to be found again elsewhere.
type dataFile struct {
	rel  string
	sum  [sha256.Size]byte
	size int
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// leftoverMounts are mounts of pods' CSI volumes and of the CSI plugin (staging, block publish) below the nodes'
// kubelet root directories that keep matches; other volumes of running pods (service account tokens…) do not
// count.
func leftoverMounts(nodes []node, keep func(string) bool) ([]mountEntry, error) {
	var out []mountEntry
	seen := map[string]bool{}
	for _, n := range nodes {
		ms, err := readMounts(n)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if under(m.point, n.RootDir) && (strings.Contains(m.point, "/volumes/kubernetes.io~csi/") ||
				strings.Contains(m.point, "/plugins/kubernetes.io/csi/")) && keep(m.point) && !seen[n.Name+m.point] {
				seen[n.Name+m.point] = true
				m.point = n.Name + ":" + m.point
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// leftoverLoops are bound loop devices whose backing file lies below one of dirs and that keep matches: fakecloud's
// volume files, and kubelet's own loop devices on published block volumes.
func leftoverLoops(dirs []string, keep func(string) bool) ([]loopdev.Device, error) {
	var out []loopdev.Device
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		devs, err := loopdev.Sysfs{}.BackedUnder(dir)
		if err != nil {
			return nil, err
		}
		for _, d := range devs {
			if keep(d.Backing) && !slices.ContainsFunc(out, func(o loopdev.Device) bool { return o.Name == d.Name }) {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// realPath resolves symlinks so that paths compare with what mountinfo and sysfs report; a path that cannot be
// resolved is returned as it is.
func realPath(p string) string {
	if p == "" {
		return p
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// waitHostReleased waits until no mount of a CSI volume (below the nodes' kubelet directories) and no loop device
// (on fakecloud's volume files or kubelet's paths) that keep matches is left.
func (r *run) waitHostReleased(t testing.TB, keep func(string) bool) {
	t.Helper()
	waitGone(t, "mounts", func(context.Context) ([]string, error) {
		ms, err := leftoverMounts(r.nodes, keep)
		var left []string
		for _, m := range ms {
			left = append(left, m.String())
		}
		return left, err
	})
	dirs := append([]string{env.cloudVolumesDir}, env.scope...)
	waitGone(t, "loop devices", func(context.Context) ([]string, error) {
		loops, err := leftoverLoops(dirs, keep)
		var left []string
		for _, l := range loops {
			left = append(left, l.Name+" -> "+l.Backing)
		}
		return left, err
	})
}
