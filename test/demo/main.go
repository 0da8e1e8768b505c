// Command demo takes one volume through its whole life over CSI gRPC: fakecloud on real loop devices, the
// driver in "all" mode, and this program as the container orchestrator. It prints every step with its time and
// leaves nothing behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskforge/diskforge/internal/hostclean"
	"github.com/diskforge/diskforge/pkg/topology"
)

const (
	instanceID = "i-0de0000000000demo"
	zone       = "us-east-1b"
	// A Xen type, whose volume limit (39) differs from the default type's.
	instanceType = "m4.large"
	gib          = int64(1) << 30
)

func main() {
	bin := flag.String("bin", "bin", "directory holding the fakecloud and driver binaries")
	fsType := flag.String("fs", "xfs", "filesystem of the demo volume (xfs grows online; ext4 online growth needs CAP_SYS_RESOURCE)")
	flag.Parse()
	if err := preflight(); err != nil {
		fmt.Fprintf(os.Stderr, "demo cannot run here: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := newDemo(*bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
	err = d.run(ctx, *fsType)
	d.cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("\ndemo passed in %s; nothing left behind\n", time.Since(d.start).Round(time.Millisecond))
}

// preflight says plainly what is missing rather than failing halfway.
func preflight() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (loop devices and mounts need it: run with sudo)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		missing = append(missing, "/dev/loop-control (load the loop module: modprobe loop)")
	}
	for _, tool := range []string{"mkfs.ext4", "mkfs.xfs", "xfs_growfs", "blkid", "df"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" (apt-get install -y e2fsprogs xfsprogs)")
		}
	}
	if len(missing) > 0 {
		return errors.New("missing " + strings.Join(missing, "; "))
	}
	return nil
}

type demo struct {
	bin, dir, dataDir, sock, cloudURL string
	start                             time.Time
	procs                             []*exec.Cmd
	conn                              *grpc.ClientConn
	ctrl                              csi.ControllerClient
	node                              csi.NodeClient
	ident                             csi.IdentityClient
}

func newDemo(bin string) (*demo, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "diskforge-demo-")
	if err != nil {
		return nil, err
	}
	return &demo{bin: abs, dir: dir, dataDir: filepath.Join(dir, "fakecloud"), sock: filepath.Join(dir, "csi.sock"), start: time.Now()}, nil
}

func (d *demo) step(format string, args ...any) {
	fmt.Printf("[%7.3fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

func (d *demo) spawn(name string, args []string, env ...string) error {
	logf, err := os.Create(filepath.Join(d.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(d.bin, name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	d.procs = append(d.procs, cmd)
	return nil
}

func (d *demo) startServices(ctx context.Context) error {
	addr, err := freePort()
	if err != nil {
		return err
	}
	d.cloudURL = "http://" + addr
	imdsAddr, err := freePort()
	if err != nil {
		return err
	}
	// The node learns who it is from the instance metadata service, as on EC2, with no cloud credentials.
	if err := d.spawn("fakecloud", []string{"--listen", addr, "--data-dir", d.dataDir, "--backend", "loop",
		"--instances", instanceID + "=" + zone + "::" + instanceType, "--imds", instanceID + "=" + imdsAddr, "--create-duration=300ms", "--attach-duration=300ms", "--detach-duration=300ms",
		"--modifying-duration=300ms", "--optimizing-duration=1s", "--snapshot-duration=500ms", "--delete-duration=300ms"}); err != nil {
		return err
	}
	if err := waitFor(ctx, func() bool {
		resp, err := http.Get(d.cloudURL + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}); err != nil {
		return fmt.Errorf("fakecloud did not come up (see %s/fakecloud.log): %w", d.dir, err)
	}
	d.step("fakecloud serving EC2 on %s (loop backend, data in %s)", d.cloudURL, d.dataDir)
	if err := d.spawn("driver", []string{"--mode", "all", "--endpoint", "unix://" + d.sock, "--cloud-endpoint", d.cloudURL,
		"--region", "us-east-1", "--imds-endpoint", "http://" + imdsAddr, "--state-dir", filepath.Join(d.dir, "node-state")},
		"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo"); err != nil {
		return err
	}
	d.conn, err = grpc.NewClient("unix://"+d.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	d.ctrl, d.node, d.ident = csi.NewControllerClient(d.conn), csi.NewNodeClient(d.conn), csi.NewIdentityClient(d.conn)
	var info *csi.GetPluginInfoResponse
	if err := waitFor(ctx, func() bool {
		info, err = d.ident.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		return err == nil
	}); err != nil {
		return fmt.Errorf("driver did not come up (see %s/driver.log): %w", d.dir, err)
	}
	d.step("driver %s %s serving CSI on %s", info.GetName(), info.GetVendorVersion(), d.sock)
	return nil
}

func waitFor(ctx context.Context, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// volume is one volume as the orchestrator tracks it.
type volume struct {
	id, staging, target string
	publishCtx, volCtx  map[string]string
	cap                 *csi.VolumeCapability
}

func (d *demo) run(ctx context.Context, fsType string) error {
	if err := d.startServices(ctx); err != nil {
		return err
	}
	info, err := d.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return err
	}
	d.step("node %s (%s, from instance metadata) in zone %s, up to %d volumes", info.GetNodeId(), instanceType, info.GetAccessibleTopology().GetSegments()[topology.ZoneKey], info.GetMaxVolumesPerNode())
	nodeTopology := []*csi.Topology{info.GetAccessibleTopology()}
	capability := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}

	created, err := d.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-demo-data", CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csi.VolumeCapability{capability}, Parameters: map[string]string{"type": "gp3", "tagSpecification_1": "app=demo"},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: nodeTopology, Preferred: nodeTopology}})
	if err != nil {
		return fmt.Errorf("CreateVolume: %w", err)
	}
	v := &volume{id: created.GetVolume().GetVolumeId(), volCtx: created.GetVolume().GetVolumeContext(), cap: capability,
		staging: filepath.Join(d.dir, "staging", "data"), target: filepath.Join(d.dir, "pods", "writer", "data")}
	d.step("CreateVolume: %s, %d GiB gp3 in zone %s", v.id, created.GetVolume().GetCapacityBytes()/gib, created.GetVolume().GetAccessibleTopology()[0].GetSegments()[topology.ZoneKey])
	if err := d.attach(ctx, v, info.GetNodeId()); err != nil {
		return err
	}
	file := filepath.Join(v.target, "hello.txt")
	payload := "written at " + time.Now().Format(time.RFC3339Nano) + "\n"
	if err := writeSynced(file, payload); err != nil {
		return err
	}
	d.step("wrote %s (%d bytes)", file, len(payload))

	d.step("df before expansion: %s", df(v.target))
	grown, err := d.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.id,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}, VolumeCapability: capability})
	if err != nil {
		return fmt.Errorf("ControllerExpandVolume: %w", err)
	}
	d.step("ControllerExpandVolume: the disk is %d GiB (node expansion required: %v)", grown.GetCapacityBytes()/gib, grown.GetNodeExpansionRequired())
	nodeGrown, err := d.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
		StagingTargetPath: v.staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}, VolumeCapability: capability})
	if err != nil {
		return fmt.Errorf("NodeExpandVolume: %w", err)
	}
	d.step("NodeExpandVolume: filesystem grown online to %d bytes; df: %s", nodeGrown.GetCapacityBytes(), df(v.target))

	snap, err := d.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-demo", SourceVolumeId: v.id})
	if err != nil {
		return fmt.Errorf("CreateSnapshot: %w", err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	d.step("CreateSnapshot: %s (ready: %v)", snapID, snap.GetSnapshot().GetReadyToUse())
	if err := waitFor(ctx, func() bool {
		l, err := d.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snapID})
		return err == nil && len(l.GetEntries()) == 1 && l.GetEntries()[0].GetSnapshot().GetReadyToUse()
	}); err != nil {
		return fmt.Errorf("snapshot never became ready: %w", err)
	}
	d.step("snapshot %s ready to use", snapID)

	restoredResp, err := d.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-demo-restored", VolumeCapabilities: []*csi.VolumeCapability{capability},
		Parameters:                map[string]string{"type": "gp3"},
		VolumeContentSource:       &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: nodeTopology, Preferred: nodeTopology}})
	if err != nil {
		return fmt.Errorf("CreateVolume from snapshot: %w", err)
	}
	r := &volume{id: restoredResp.GetVolume().GetVolumeId(), volCtx: restoredResp.GetVolume().GetVolumeContext(), cap: capability,
		staging: filepath.Join(d.dir, "staging", "restored"), target: filepath.Join(d.dir, "pods", "reader", "data")}
	d.step("CreateVolume from %s: %s, %d GiB", snapID, r.id, restoredResp.GetVolume().GetCapacityBytes()/gib)
	if err := d.attach(ctx, r, info.GetNodeId()); err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(r.target, "hello.txt"))
	if err != nil {
		return fmt.Errorf("read restored file: %w", err)
	}
	if string(got) != payload {
		return fmt.Errorf("restored file holds %q, want %q", got, payload)
	}
	d.step("read hello.txt back from the restored volume: %q", strings.TrimSpace(string(got)))

	for _, vol := range []*volume{r, v} {
		if err := d.detachAndDelete(ctx, vol, info.GetNodeId()); err != nil {
			return err
		}
	}
	if _, err := d.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil {
		return fmt.Errorf("DeleteSnapshot: %w", err)
	}
	d.step("DeleteSnapshot: %s", snapID)
	return nil
}

// attach does what the attacher and kubelet do: ControllerPublish, NodeStage (format), NodePublish.
func (d *demo) attach(ctx context.Context, v *volume, nodeID string) error {
	pub, err := d.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: nodeID, VolumeCapability: v.cap})
	if err != nil {
		return fmt.Errorf("ControllerPublishVolume %s: %w", v.id, err)
	}
	v.publishCtx = pub.GetPublishContext()
	d.step("ControllerPublishVolume: %s attached to %s as %s", v.id, nodeID, v.publishCtx["devicePath"])
	for _, dir := range []string{v.staging, filepath.Dir(v.target)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	if _, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.id, PublishContext: v.publishCtx,
		StagingTargetPath: v.staging, VolumeCapability: v.cap, VolumeContext: v.volCtx}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.id, err)
	}
	d.step("NodeStageVolume: %s on %s (%s)", mountSource(v.staging), v.staging, blkid(mountSource(v.staging)))
	if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, PublishContext: v.publishCtx,
		StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.cap, VolumeContext: v.volCtx}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", v.id, err)
	}
	d.step("NodePublishVolume: bind mounted on %s", v.target)
	return nil
}

// detachAndDelete is the teardown: NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume.
func (d *demo) detachAndDelete(ctx context.Context, v *volume, nodeID string) error {
	if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s: %w", v.id, err)
	}
	d.step("NodeUnpublishVolume: %s", v.target)
	if _, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", v.id, err)
	}
	d.step("NodeUnstageVolume: %s", v.staging)
	if _, err := d.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: nodeID}); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume %s: %w", v.id, err)
	}
	d.step("ControllerUnpublishVolume: %s detached from %s", v.id, nodeID)
	if _, err := d.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", v.id, err)
	}
	d.step("DeleteVolume: %s", v.id)
	return nil
}

func writeSynced(path, content string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func df(path string) string {
	out, err := exec.Command("df", "-h", "--output=size,used,avail,target", path).Output()
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(strings.Fields(lines[len(lines)-1]), " ")
}

func blkid(dev string) string {
	out, _ := exec.Command("blkid", "-o", "value", "-s", "TYPE", dev).Output()
	return strings.TrimSpace(string(out))
}

// mountSource is the device mounted on path.
func mountSource(path string) string {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	if err != nil || len(mounts) == 0 {
		return "?"
	}
	return mounts[len(mounts)-1].Source
}

// cleanup runs whatever happened: unmount what the demo mounted, stop the processes, release the loop devices
// of the demo's volumes, remove its directory.
func (d *demo) cleanup() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
	if err := hostclean.UnmountUnder(d.dir); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: %v\n", err)
	}
	for i := len(d.procs) - 1; i >= 0; i-- {
		p := d.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	if err := hostclean.ReleaseLoopsUnder(d.dir); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: %v\n", err)
	}
	if os.Getenv("DEMO_KEEP") == "" {
		_ = os.RemoveAll(d.dir)
	}
}
