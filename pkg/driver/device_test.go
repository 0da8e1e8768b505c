package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// TestNodeCreatesDeviceNode: with a DevDir lacking the loop device's node (as a container's /dev may), the node
// is created from sysfs and the whole stage/publish/expand path works through it.
func TestNodeCreatesDeviceNode(t *testing.T) {
	t.Parallel()
	devDir := t.TempDir()
	e := newNodeEnv(t, NodeOptions{DevDir: devDir})
	id, hostDev := e.volume(ext4Size, nil)
	node := filepath.Join(devDir, filepath.Base(hostDev))
	if _, err := os.Lstat(node); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists before the lookup: %v", node, err)
	}
	vc := mountCap("ext4", rwo)
	staging, target := e.path("staging"), e.path("target")
	e.mustStage(id, staging, vc, nil)
	want, _, _ := machine.blockDevice(hostDev)
	got, isBlock, err := machine.blockDevice(node)
	if err != nil || !isBlock || got != want {
		t.Fatalf("created node %s: block %v rdev %d err %v; want %d", node, isBlock, got, err, want)
	}
	e.mustPublish(id, staging, target, vc, false)
	if err := e.backend.ResizeVolume(context.Background(), id, 2*ext4Size); err != nil {
		t.Fatal(err)
	}
	// Whether the kernel allows online ext4 growth or not, the device behind the mount must be found.
	_, err = e.node.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target})
	if c := status.Code(err); c != codes.OK && c != codes.FailedPrecondition {
		t.Fatalf("NodeExpandVolume through the created node: %v", err)
	}
	e.mustUnpublish(id, target)
	e.mustUnstage(id, staging)
}

// TestDeviceFinderRefusesWrongNode: an existing entry in DevDir under the device's name that is not that
// device is an error, never used.
func TestDeviceFinderRefusesWrongNode(t *testing.T) {
	t.Parallel()
	devDir := t.TempDir()
	e := newNodeEnv(t, NodeOptions{DevDir: devDir})
	id, hostDev := e.volume(ext4Size, nil)
	if err := os.WriteFile(filepath.Join(devDir, filepath.Base(hostDev)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f := realFinder(t, devDir, time.Second)
	if dev, err := f.Find(context.Background(), id, nil); err == nil {
		t.Fatalf("Find used the plain file %s", dev)
	}
}

// TestDeviceFinderTimeout: a volume without a device ends the wait after DeviceWait (Internal at the RPC), or
// at the caller's deadline (DeadlineExceeded).
func TestDeviceFinderTimeout(t *testing.T) {
	t.Parallel()
	testutil.SkipUnless(t, loopSysfs(), "the device finder reads /sys/block")
	f := realFinder(t, t.TempDir(), 300*time.Millisecond)
	start := time.Now()
	_, err := f.Find(context.Background(), "vol-00000000nothere", map[string]string{PublishDevicePath: "/dev/xvdz"})
	if !errors.Is(err, errDeviceNotFound) || status.Code(rpcError(err)) != codes.Internal {
		t.Fatalf("Find of a missing device: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("Find waited %s, want about 300ms", took)
	}

	f.wait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = f.Find(ctx, "vol-00000000nothere", nil)
	if !errors.Is(err, errDeviceNotFound) || status.Code(rpcError(err)) != codes.DeadlineExceeded {
		t.Fatalf("Find past the caller's deadline: %v (%s)", err, status.Code(rpcError(err)))
	}
	if _, err := f.Find(context.Background(), "../etc", nil); !errors.Is(err, errInvalidParameter) {
		t.Fatalf("Find with a path as volume ID: %v", err)
	}
}

// TestDeviceFinderEBS: the EBS NVMe link is followed and the device's serial checked.
func TestDeviceFinderEBS(t *testing.T) {
	t.Parallel()
	m := newFakeMachine(t)
	d := m.nvmeVolume("vol-0abc123", 1, gib)
	n := newFakeEnv(t, m).node
	dev, err := n.devices.Find(context.Background(), "vol-0abc123", nil)
	if err != nil || dev != d.node {
		t.Fatalf("Find = %q, %v; want %s", dev, err, d.node)
	}
	// A stale link whose device now carries another volume's serial is not trusted.
	must(t, os.WriteFile(filepath.Join(m.sys.block.Root, d.name, "device", "serial"), []byte("vol0fff999\n"), 0o644))
	if dev, err := n.devices.Find(context.Background(), "vol-0abc123", nil); !errors.Is(err, errDeviceNotFound) {
		t.Fatalf("Find through a stale link = %q, %v", dev, err)
	}
}

// realFinder is the device finder of the real machine, with its records in memory.
func realFinder(t *testing.T, devDir string, wait time.Duration) *deviceFinder {
	t.Helper()
	state, err := newNodeState("")
	if err != nil {
		t.Fatal(err)
	}
	return &deviceFinder{devDir: devDir, sys: machine.sysfs(), wait: wait, host: machine, state: state, boot: "test-boot"}
}

func loopSysfs() error {
	_, err := os.Stat(loopdev.DefaultRoot)
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
