package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
)

const mib = int64(1) << 20

// Volume sizes: mkfs.xfs refuses filesystems under 300 MB.
const (
	ext4Size = 64 * mib
	xfsSize  = 320 * mib
)

// machine is the real host, for tests that look at what the node did on it.
var machine host = &realHost{sys: sysfsView{devBlock: sysDevBlock}, devDir: DefaultDevDir}

// nodeEnv is a node server on real loop devices. Everything it mounts lies under dir, and every volume it
// creates is force-detached at cleanup, after the mounts under dir are gone.
type nodeEnv struct {
	t       *testing.T
	backend *blockdev.LoopBackend
	node    *NodeServer
	dir     string
}

// newNodeEnv skips unless loop devices, mount and the filesystem tools are available (fails in CI instead).
func newNodeEnv(t *testing.T, opts NodeOptions) *nodeEnv {
	t.Helper()
	testutil.SkipUnless(t, blockdev.Available(), "node tests stage real loop devices: need root and /dev/loop-control")
	testutil.RequireTools(t, "mount", "umount", "blkid", "mkfs.ext4", "mkfs.ext3", "mkfs.xfs", "e2fsck", "resize2fs", "dumpe2fs",
		"tune2fs", "xfs_growfs", "xfs_info")
	backend, err := blockdev.NewLoopBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return newNodeEnvOn(t, opts, backend)
}

// newNodeEnvOn is newNodeEnv on the given backend (the fuse backend's embedded LoopBackend, say).
func newNodeEnvOn(t *testing.T, opts NodeOptions, backend *blockdev.LoopBackend) *nodeEnv {
	t.Helper()
	dir := t.TempDir()
	// Registered after TempDir, so it runs before the directories are removed.
	t.Cleanup(func() { testutil.UnmountUnder(t, dir) })
	if opts.InstanceID == "" {
		opts.InstanceID, opts.Zone = "i-0test", "zone-a"
	}
	if opts.DeviceWait == 0 {
		opts.DeviceWait = 2 * time.Second
	}
	node, err := NewNodeServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &nodeEnv{t: t, backend: backend, node: node, dir: dir}
}

// volume creates and attaches a volume with a unique ID (other tests and processes may use loop devices too).
// prepare, when set, runs on the backing file before the attach.
func (e *nodeEnv) volume(size int64, prepare func(file string)) (id, dev string) {
	e.t.Helper()
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	id = "vol-" + hex.EncodeToString(b)[:17]
	ctx := context.Background()
	if err := e.backend.CreateVolume(ctx, id, size); err != nil {
		e.t.Fatal(err)
	}
	if prepare != nil {
		prepare(e.backend.VolumeFile(id))
	}
	dev, err := e.backend.Attach(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		testutil.UnmountUnder(e.t, e.dir)
		if err := e.backend.Detach(context.Background(), id, true); err != nil {
			e.t.Errorf("cleanup: detach %s: %v", id, err)
		}
	})
	return id, dev
}

// path names a path under the env's directory (not created).
func (e *nodeEnv) path(name string) string { return filepath.Join(e.dir, name) }

func (e *nodeEnv) stage(id, staging string, vc *csi.VolumeCapability, volumeContext map[string]string) error {
	_, err := e.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: id,
		StagingTargetPath: staging, VolumeCapability: vc, VolumeContext: volumeContext})
	return err
}

func (e *nodeEnv) mustStage(id, staging string, vc *csi.VolumeCapability, volumeContext map[string]string) {
	e.t.Helper()
	if err := e.stage(id, staging, vc, volumeContext); err != nil {
		e.t.Fatalf("NodeStageVolume %s: %v", id, err)
	}
}

func (e *nodeEnv) mustUnstage(id, staging string) {
	e.t.Helper()
	if _, err := e.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		e.t.Fatalf("NodeUnstageVolume %s: %v", id, err)
	}
}

func (e *nodeEnv) publish(id, staging, target string, vc *csi.VolumeCapability, readOnly bool) error {
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: id,
		StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc, Readonly: readOnly})
	return err
}

func (e *nodeEnv) mustPublish(id, staging, target string, vc *csi.VolumeCapability, readOnly bool) {
	e.t.Helper()
	if err := e.publish(id, staging, target, vc, readOnly); err != nil {
		e.t.Fatalf("NodePublishVolume %s on %s: %v", id, target, err)
	}
}

func (e *nodeEnv) mustUnpublish(id, target string) {
	e.t.Helper()
	if _, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		e.t.Fatalf("NodeUnpublishVolume %s on %s: %v", id, target, err)
	}
}

// Calls as the safety tables run them.

func (e *nodeEnv) stageCall(id, staging string, vc *csi.VolumeCapability) func() error {
	return func() error { return e.stage(id, staging, vc, nil) }
}

func (e *nodeEnv) publishCall(id, staging, target string, vc *csi.VolumeCapability, ro bool) func() error {
	return func() error { return e.publish(id, staging, target, vc, ro) }
}

func (e *nodeEnv) unstageCall(id, staging string) func() error {
	return func() error {
		_, err := e.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		return err
	}
}

func (e *nodeEnv) unpublishCall(id, target string) func() error {
	return func() error {
		_, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		return err
	}
}

func (e *nodeEnv) expandCall(id, path string, vc *csi.VolumeCapability) func() error {
	return func() error {
		_, err := e.node.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: path, VolumeCapability: vc})
		return err
	}
}

func (e *nodeEnv) statsCall(id, path string) func() error {
	return func() error {
		_, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
		return err
	}
}

func (e *nodeEnv) healthCall(id, publishPath, staging string) func() error {
	return func() error {
		_, err := e.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: id,
			VolumePublishPath: publishPath, StagingTargetPath: staging})
		return err
	}
}

// gone checks that path does not exist.
func gone(path string) func(t *testing.T) {
	return func(t *testing.T) {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v)", path, err)
		}
	}
}

func mountCap(fsType string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

const rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

// wantCode fails unless err carries code.
func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, code)
	}
}

// isMounted reports whether path is a mount point, failing the test on errors other than a missing path.
func isMounted(t *testing.T, path string) bool {
	t.Helper()
	_, mounted, err := mountAt(machine, path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("mountAt %s: %v", path, err)
	}
	return mounted
}

// mountedFSType is the filesystem type mountinfo gives the mount at path.
func mountedFSType(t *testing.T, path string) string {
	t.Helper()
	mi, mounted, err := mountAt(machine, path)
	if err != nil || !mounted {
		t.Fatalf("mountAt %s: %v, mounted %v", path, err, mounted)
	}
	return mi.FSType
}

func statfsTotal(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Blocks) * st.Bsize
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}
