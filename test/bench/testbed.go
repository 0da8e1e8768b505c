package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// testbed is fakecloud on one block backend and, per registered instance, one driver (controller and node, as
// --mode all runs them) on the host, driven only through the drivers' CSI sockets. It tracks every volume it
// created through each step (created, attached, staged, mounted), so that close can undo what a failed or
// interrupted run left and then sweep what only the kernel still knows (mounts and loop devices under its
// directory).
type testbed struct {
	dir     string
	backend string
	cloud   *procs
	drivers []*procs
	conns   []*grpc.ClientConn
	nodes   []benchNode
	url     string
	pid     int

	mu   sync.Mutex
	vols map[string]*benchVolume
	seq  int
}

// benchNode is one instance and the driver that serves it.
type benchNode struct {
	id   string
	ctrl csi.ControllerClient
	node csi.NodeClient
	topo *csi.Topology
}

// benchVolume is one volume and how far it got; the fields change under testbed.mu.
type benchVolume struct {
	id, fsType string
	node       int
	publishCtx map[string]string
	attached   bool
	staging    string // set while staged
	target     string // set while mounted (NodePublishVolume)
}

// testbedOptions are what a testbed starts with.
type testbedOptions struct {
	fakecloud, driver string
	backend           string
	instances         int
	// perInstance is each instance's attachment limit.
	perInstance int
	verbosity   int
}

// instanceID is the bench's instance number i.
func instanceID(i int) string { return fmt.Sprintf("i-0fb%014d", i) }

// fakecloudArgs are the flags a testbed starts fakecloud with: every transition instant, state and volume
// files really fsynced (the default), and provisioned IOPS not enforced where this fakecloud can enforce them,
// so that both backends run at what the machine can do.
func fakecloudArgs(bin, backend string, instances, perInstance int) []string {
	var spec []string
	for i := range instances {
		spec = append(spec, fmt.Sprintf("%s=us-east-1a:%d", instanceID(i), perInstance))
	}
	args := []string{"--backend", backend, "--instances", strings.Join(spec, ","),
		"--create-duration", "0s", "--attach-duration", "0s", "--detach-duration", "0s", "--delete-duration", "0s"}
	if hasFlag(bin, "io-limits") {
		args = append(args, "--io-limits=false")
	}
	return args
}

func startTestbed(ctx context.Context, dir string, o testbedOptions) (_ *testbed, err error) {
	t := &testbed{dir: dir, backend: o.backend, cloud: &procs{dir: dir}, vols: map[string]*benchVolume{}}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.url, err = t.cloud.startFakecloudWith(ctx, o.fakecloud, fakecloudArgs(o.fakecloud, o.backend, o.instances, o.perInstance)...); err != nil {
		return t, fmt.Errorf("fakecloud --backend %s (log in %s): %w", o.backend, dir, err)
	}
	if t.pid, err = t.cloud.pid("fakecloud"); err != nil {
		return t, err
	}
	for i := range o.instances {
		pr := &procs{dir: filepath.Join(dir, fmt.Sprintf("driver-%d", i))}
		t.drivers = append(t.drivers, pr)
		if err := os.Mkdir(pr.dir, 0o700); err != nil {
			return t, err
		}
		args := []string{"--mode", "all", "--cloud-endpoint", t.url, "--region", "us-east-1",
			"--instance-id", instanceID(i), "--zone", "us-east-1a", "--instance-type", "m5.large",
			"--max-volumes-per-node", fmt.Sprint(o.perInstance), "--state-dir", filepath.Join(pr.dir, "state"),
			fmt.Sprintf("-v=%d", o.verbosity)}
		if hasFlag(o.driver, "imds") {
			args = append(args, "--imds=false")
		}
		conn, err := pr.startDriver(ctx, o.driver, args...)
		if err != nil {
			return t, fmt.Errorf("driver %d (log in %s): %w", i, pr.dir, err)
		}
		t.conns = append(t.conns, conn)
		n := benchNode{id: instanceID(i), ctrl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn)}
		info, err := n.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err != nil {
			return t, fmt.Errorf("NodeGetInfo: %w", grpcErr(err))
		}
		n.topo = info.GetAccessibleTopology()
		t.nodes = append(t.nodes, n)
	}
	return t, nil
}

func mountCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

// create makes a gp3 volume in the zone of instance node, for a filesystem of fsType.
func (t *testbed) create(ctx context.Context, node int, fsType string, sizeGiB int) (*benchVolume, error) {
	t.mu.Lock()
	t.seq++
	name := fmt.Sprintf("pvc-fusebench-%s-%05d", t.backend, t.seq)
	t.mu.Unlock()
	n := t.nodes[node]
	resp, err := n.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name,
		CapacityRange:             &csi.CapacityRange{RequiredBytes: int64(sizeGiB) << 30},
		VolumeCapabilities:        []*csi.VolumeCapability{mountCapability(fsType)},
		Parameters:                map[string]string{"type": "gp3"},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{n.topo}, Preferred: []*csi.Topology{n.topo}}})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume: %w", grpcErr(err))
	}
	v := &benchVolume{id: resp.GetVolume().GetVolumeId(), fsType: fsType, node: node}
	t.mu.Lock()
	t.vols[v.id] = v
	t.mu.Unlock()
	return v, nil
}

// attach publishes the volume to its instance (ControllerPublishVolume), which binds its device.
func (t *testbed) attach(ctx context.Context, v *benchVolume) error {
	n := t.nodes[v.node]
	resp, err := n.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: n.id,
		VolumeCapability: mountCapability(v.fsType)})
	if err != nil {
		return fmt.Errorf("ControllerPublishVolume %s: %w", v.id, grpcErr(err))
	}
	t.mu.Lock()
	v.attached, v.publishCtx = true, resp.GetPublishContext()
	t.mu.Unlock()
	return nil
}

// stage runs NodeStageVolume (the volume is blank: mkfs, then mount) and returns how long it took.
func (t *testbed) stage(ctx context.Context, v *benchVolume) (time.Duration, error) {
	staging := filepath.Join(t.dir, "staging", v.id)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return 0, err
	}
	t.mu.Lock()
	v.staging = staging // before the call: a stage cut short may still have mounted
	t.mu.Unlock()
	start := time.Now()
	_, err := t.nodes[v.node].node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.id,
		StagingTargetPath: staging, PublishContext: v.publishCtx, VolumeCapability: mountCapability(v.fsType)})
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("NodeStageVolume %s: %w", v.id, grpcErr(err))
	}
	return took, nil
}

// mount runs NodePublishVolume and returns the directory a pod would see.
func (t *testbed) mount(ctx context.Context, v *benchVolume) (string, error) {
	target := filepath.Join(t.dir, "pods", v.id, "mount")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	t.mu.Lock()
	v.target = target
	t.mu.Unlock()
	_, err := t.nodes[v.node].node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id,
		StagingTargetPath: v.staging, TargetPath: target, PublishContext: v.publishCtx, VolumeCapability: mountCapability(v.fsType)})
	if err != nil {
		return "", fmt.Errorf("NodePublishVolume %s: %w", v.id, grpcErr(err))
	}
	return target, nil
}

// release undoes what was done to the volume, last step first, as kubelet and the sidecars would: unmount,
// unstage, detach, delete.
func (t *testbed) release(ctx context.Context, v *benchVolume) error {
	n := t.nodes[v.node]
	t.mu.Lock()
	target, staging, attached := v.target, v.staging, v.attached
	t.mu.Unlock()
	if target != "" {
		if _, err := n.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target}); err != nil {
			return fmt.Errorf("NodeUnpublishVolume %s: %w", v.id, grpcErr(err))
		}
	}
	if staging != "" {
		if _, err := n.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: staging}); err != nil {
			return fmt.Errorf("NodeUnstageVolume %s: %w", v.id, grpcErr(err))
		}
	}
	if attached {
		if _, err := n.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: n.id}); err != nil {
			return fmt.Errorf("ControllerUnpublishVolume %s: %w", v.id, grpcErr(err))
		}
	}
	if _, err := n.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", v.id, grpcErr(err))
	}
	t.mu.Lock()
	delete(t.vols, v.id)
	t.mu.Unlock()
	return nil
}

// releaseAll releases every volume still held, a few at a time.
func (t *testbed) releaseAll(ctx context.Context) error {
	t.mu.Lock()
	vols := slices.Collect(func(yield func(*benchVolume) bool) {
		for _, v := range t.vols {
			if !yield(v) {
				return
			}
		}
	})
	t.mu.Unlock()
	return forEach(ctx, vols, 8, false, func(ctx context.Context, v *benchVolume) error { return t.release(ctx, v) })
}

// close releases every volume through the drivers, even when the run's context is cancelled, stops the
// processes, and then removes whatever mount or loop device under the testbed's directory is still there (a
// driver or fakecloud that failed), touching nothing else.
func (t *testbed) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if len(t.nodes) > 0 {
		if err := t.releaseAll(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: release:", err)
		}
	}
	// What the drivers failed to unmount goes before fakecloud stops: a FUSE mount is not let go while a
	// filesystem on one of its devices is still mounted.
	for _, sub := range []string{"pods", "staging"} {
		if err := sweep(filepath.Join(t.dir, sub)); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
	}
	for _, c := range t.conns {
		_ = c.Close()
	}
	for _, d := range t.drivers {
		d.stop()
	}
	t.cloud.stop()
	if err := sweep(t.dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
	}
}

// sweep unmounts every mount below dir (deepest first) and detaches every loop device whose backing file lies
// below it, then unmounts what is left (a FUSE mount whose server died holds its devices until they go).
func sweep(dir string) error {
	var errs []error
	unmount := func() {
		mnts, err := mountsUnder(dir)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, m := range mnts {
			if err := unix.Unmount(m, 0); err != nil {
				// Busy (a process still in it) or a dead FUSE server: detach it from the tree now.
				if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
				}
			}
		}
	}
	unmount()
	devs, err := loopdev.Sysfs{}.BackedUnder(dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range devs {
		if err := run("losetup", "-d", d.Path()); err != nil {
			errs = append(errs, err)
		}
	}
	unmount()
	return errors.Join(errs...)
}

// mountsUnder lists the mount points below dir from /proc/self/mountinfo, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return parseMountsUnder(f, dir)
}

func parseMountsUnder(r io.Reader, dir string) ([]string, error) {
	prefix := strings.TrimSuffix(filepath.Clean(dir), "/") + "/"
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Spaces and the like are octal escapes (\040); the bench's own paths have none, so no match is lost.
		if p := fields[4]; strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(out), sc.Err()
}

// forEach runs do on every item, at most width at once. With stopOnError it starts no new one after the first
// error or once ctx is done; without, it tries them all (cleanup).
func forEach[T any](ctx context.Context, items []T, width int, stopOnError bool, do func(context.Context, T) error) error {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) > 0 }
	for _, it := range items {
		if stopOnError && (failed() || ctx.Err() != nil) {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := do(ctx, it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if stopOnError && len(errs) == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
