package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// changedSysctls are the host settings the run changes: kubelet's (whatever its configuration), and IPv4
// forwarding, which the CNI bridge plugin turns on for a gateway bridge. The run puts them back.
var changedSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

// cgroupParent is where containerd puts containers when kubelet names no cgroup parent (cgroupsPerQOS off):
// /<namespace>/<id> in every hierarchy.
const cgroupParent = "k8s.io"

// loopPrefixes are the backing-file paths, as nodes see them, of the loop devices a run binds: fakecloud's
// volumes, and kubelet's own loop devices on published block volumes.
var loopPrefixes = []string{"/var/lib/fakecloud/", "/var/lib/kubelet/"}

// hostState is what the run found on the host: restore puts it back and removes what the run added.
type hostState struct {
	sysctls     map[string]string
	loops       map[string]string // loop device → backing file before the run
	cgroups     []string          // cgroup parents containerd will create, absent before the run
	createdDirs []string
}

func captureHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, loops: map[string]string{}}
	for _, k := range changedSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		h.sysctls[k] = strings.TrimSpace(string(v))
	}
	devs, err := loopdev.Sysfs{}.List()
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		h.loops[d.Name] = d.Backing
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, hdir := range hierarchies {
		p := filepath.Join(hdir, cgroupParent)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			h.cgroups = append(h.cgroups, p)
		}
	}
	return h, nil
}

// restore releases the run's loop devices (backed by files below workDir), kills what is left in the run's
// cgroups and removes them, puts the sysctls back and removes the host directories the run created.
func (h *hostState) restore(workDir string, logf func(string, ...any)) {
	devs, err := loopdev.Sysfs{}.List()
	if err != nil {
		logf("teardown: list loop devices: %v", err)
	}
	var files map[fileID]bool
	for _, d := range devs {
		if before, ok := h.loops[d.Name]; ok && before == d.Backing {
			continue
		}
		if files == nil {
			files = filesBelow(workDir)
		}
		ours := slices.ContainsFunc(loopPrefixes, func(p string) bool { return strings.HasPrefix(d.Backing, p) })
		released, err := releaseLoop(d.Path(), func(id fileID) bool { return ours || files[id] })
		if err != nil {
			logf("teardown: %v", err)
		} else if released {
			logf("teardown: released %s (%s)", d.Path(), d.Backing)
		}
	}
	for _, cg := range h.cgroups {
		removeCgroupTree(cg, logf)
	}
	for k, v := range h.sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			logf("teardown: restore %s=%s: %v", k, v, err)
		}
	}
	for i := len(h.createdDirs) - 1; i >= 0; i-- {
		if err := os.Remove(h.createdDirs[i]); err != nil {
			logf("teardown: remove %s: %v", h.createdDirs[i], err)
		}
	}
}

// fileID is a file's device and inode numbers, as stat(2) and LOOP_GET_STATUS64 report them.
type fileID struct{ dev, ino uint64 }

// filesBelow lists the regular files below dir. A loop device backed by one of them is the run's even when its
// backing path no longer says so: once the mount namespace of the pod that bound it is gone, the kernel reports
// the path within the detached mount ("/volumes/vol-….img"), not the node's /var/lib/fakecloud/….
func filesBelow(dir string) map[fileID]bool {
	ids := map[fileID]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			ids[fileID{st.Dev, st.Ino}] = true
		}
		return nil
	})
	return ids
}

// releaseLoop detaches the loop device dev if its backing file is one that ours accepts: the file is read
// through the open device, so that it cannot change between the check and the release.
func releaseLoop(dev string, ours func(fileID) bool) (bool, error) {
	f, err := os.Open(dev)
	if err != nil {
		return false, err
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if errors.Is(err, unix.ENXIO) {
		return false, nil // not bound (any more)
	}
	if err != nil {
		return false, fmt.Errorf("status of %s: %w", dev, err)
	}
	if !ours(fileID{info.Device, info.Inode}) {
		return false, nil
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return false, fmt.Errorf("release %s: %w", dev, err)
	}
	return true, nil
}

// removeCgroupTree kills the processes left in the cgroups below dir and removes them, deepest first.
func removeCgroupTree(dir string, logf func(string, ...any)) {
	var dirs []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		for attempt := 0; attempt < 20; attempt++ {
			raw, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			pids := strings.Fields(string(raw))
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			} else if attempt == 19 {
				logf("teardown: remove cgroup %s: %v", d, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// removePods stops and removes every pod sandbox of the node through its containerd (CRI), which stops the
// containers, tears their network down and unmounts their root filesystems.
func (c *Cluster) removePods(n *node) error {
	if n.containerd == nil || n.containerd.exited() {
		return nil
	}
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
		}
	}
	c.logf("%s: removed %d pod sandboxes", n.info.Name, len(list.Items))
	return errors.Join(errs...)
}

// killShims kills the runc shims containerd at socket started, if any outlived it (they leave their process group).
func killShims(socket string, logf func(string, ...any)) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				logf("teardown: killing shim %d of %s", pid, socket)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
