package fakecloud_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/hostclean"
	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

func requireLoop(t testing.TB) {
	t.Helper()
	testutil.SkipUnless(t, blockdev.Available(), "loop backend needs root and /dev/loop-control")
	testutil.RequireTools(t, "mkfs.ext4", "blockdev")
}

// startLoopCloud runs fakecloud on loop devices (backend loop or fuse) and, whatever happens, releases every
// device and mount the test made under its data directory. opts adjust the cloud's options (a DataDir they set
// is used, and cleaned, instead of a temporary one).
func startLoopCloud(t testing.TB, backend string, opts ...func(*fakecloudtest.Options)) *fakecloudtest.Env {
	t.Helper()
	requireLoop(t)
	o := fakecloudtest.Options{Backend: backend}
	for _, opt := range opts {
		opt(&o)
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	dir := o.DataDir
	if backend == fakecloud.BackendFuse {
		testutil.SkipUnless(t, fuseblock.Available(), "fuse backend needs /dev/fuse")
		// Last resort after Close: devices of the FUSE mount first, while their files still have a path.
		t.Cleanup(func() {
			if err := hostclean.ReleaseLoopsUnder(dir); err != nil {
				t.Logf("cleanup: %v", err)
			}
			testutil.UnmountUnder(t, dir)
		})
	}
	env := fakecloudtest.Start(t, o)
	t.Cleanup(func() {
		vols, _, _ := env.Server.State.DescribeVolumes(statelessDescribe())
		for _, v := range vols {
			if dev := env.Server.Backend.DevicePath(v.ID); dev != "" {
				unmountDevice(t, dev)
				_ = env.Server.Backend.Detach(context.Background(), v.ID, true)
			}
		}
	})
	return env
}

func blockSize(t *testing.T, dev string) int64 {
	t.Helper()
	out, err := exec.Command("blockdev", "--getsize64", dev).Output()
	if err != nil {
		t.Fatalf("blockdev --getsize64 %s: %v", dev, err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	return n
}

// unmountDevice unmounts whatever the test mounted from dev.
func unmountDevice(t testing.TB, dev string) {
	mounts, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Source != dev, false })
	for _, m := range mounts {
		_ = unix.Unmount(m.Mountpoint, 0)
	}
}

// deviceFiler is the fuse backend, whose devices are bound to a FUSE view of the volume file.
type deviceFiler interface{ DeviceFile(volumeID string) string }

// boundFile is the file the volume's loop device is bound to.
func boundFile(b blockdev.Backend, volumeID string) string {
	if df, ok := b.(deviceFiler); ok {
		return df.DeviceFile(volumeID)
	}
	return b.VolumeFile(volumeID)
}

func TestLoopBackendThroughAPI(t *testing.T) {
	for _, backend := range []string{fakecloud.BackendLoop, fakecloud.BackendFuse} {
		t.Run(backend, func(t *testing.T) { testBackendThroughAPI(t, backend) })
	}
}

func testBackendThroughAPI(t *testing.T, backend string) {
	env := startLoopCloud(t, backend)
	c := env.EC2(t)
	ctx := context.Background()
	inst := env.Instances[zoneA]
	const gib = int64(1) << 30

	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	attached(t, c, vol, inst, "/dev/xvdba")
	dev := env.Server.Backend.DevicePath(vol)
	if dev == "" {
		t.Fatal("attached volume has no loop device")
	}
	found, err := blockdev.FindLoopDevice(boundFile(env.Server.Backend, vol))
	if err != nil || found != dev {
		t.Fatalf("FindLoopDevice by backing file = %q, %v; want %s", found, err, dev)
	}
	if got := blockSize(t, dev); got != gib {
		t.Fatalf("device size %d, want %d", got, gib)
	}
	payload := []byte("written through the loop device")
	writeAt(t, dev, payload, 4096)

	if _, err := c.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: &vol, Size: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "online growth", func(context.Context) (bool, error) {
		return blockSize(t, dev) == 3*gib, nil
	})

	snap, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	sid := aws.ToString(snap.SnapshotId)
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{sid}})
		return err == nil && out.Snapshots[0].State == types.SnapshotStateCompleted, err
	})
	restored := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &sid})
	attached(t, c, restored, inst, "/dev/xvdbb")
	rdev := env.Server.Backend.DevicePath(restored)
	if got := readAt(t, rdev, len(payload), 4096); !bytes.Equal(got, payload) {
		t.Errorf("restored bytes %q, want %q", got, payload)
	}
	if got := blockSize(t, rdev); got != 3*gib {
		t.Errorf("restored size %d, want %d", got, 3*gib)
	}

	// A mounted device keeps a plain detach busy, as a mounted disk does on EC2.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", rdev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	mnt := t.TempDir()
	if err := unix.Mount(rdev, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, 0) })
	if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &restored}); err != nil {
		t.Fatal(err)
	}
	waitAttachment(t, c, restored, types.VolumeAttachmentStateBusy)
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, restored)
	if found, _ := blockdev.FindLoopDevice(boundFile(env.Server.Backend, restored)); found != "" {
		t.Errorf("detached volume still on %s", found)
	}

	if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, vol)
	for _, id := range []string{vol, restored} {
		if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(id)}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c, id)
		if _, err := os.Stat(env.Server.Backend.VolumeFile(id)); !os.IsNotExist(err) {
			t.Errorf("volume file of deleted %s remains: %v", id, err)
		}
	}
	if _, err := c.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: &sid}); err != nil {
		t.Fatal(err)
	}
	// The file goes on a worker, moments after the reply.
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot files removed", func(context.Context) (bool, error) {
		left, err := filepath.Glob(filepath.Join(env.DataDir, "snapshots", "*"))
		return len(left) == 0, err
	})
}

// TestLoopDevicesSurviveRestart: fakecloud restarts while a volume is attached; the device is found again and
// still carries the data.
func TestLoopDevicesSurviveRestart(t *testing.T) {
	requireLoop(t)
	dir := t.TempDir()
	first := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendLoop, DataDir: dir})
	c := first.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	attached(t, c, vol, first.Instances[zoneA], "/dev/xvdba")
	dev := first.Server.Backend.DevicePath(vol)
	t.Cleanup(func() {
		b, err := blockdev.NewLoopBackend(dir)
		if err == nil {
			_ = b.Detach(context.Background(), vol, true)
		}
	})
	writeAt(t, dev, []byte("persist"), 0)
	first.Close()

	second := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendLoop, DataDir: dir})
	if got := second.Server.Backend.DevicePath(vol); got != dev {
		t.Errorf("after restart device %q, want %q", got, dev)
	}
	if got := readAt(t, dev, 7, 0); string(got) != "persist" {
		t.Errorf("data after restart %q", got)
	}
	c = second.EC2(t)
	if _, err := c.DetachVolume(context.Background(), &ec2.DetachVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, vol)
}

// TestFuseDevicesRebindAfterRestart: the fuse backend's devices end with the process that serves them; after
// a restart the attached volume has a device again, with its data.
func TestFuseDevicesRebindAfterRestart(t *testing.T) {
	first := startLoopCloud(t, fakecloud.BackendFuse)
	c := first.EC2(t)
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})
	attached(t, c, vol, first.Instances[zoneA], "/dev/xvdba")
	writeAt(t, first.Server.Backend.DevicePath(vol), []byte("persist"), 0)
	first.Close()
	if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(first.DataDir)); err != nil || len(left) > 0 {
		t.Fatalf("mounts left after Close: %v, %v", left, err)
	}

	second := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendFuse, DataDir: first.DataDir})
	dev := second.Server.Backend.DevicePath(vol)
	if dev == "" {
		t.Fatal("attached volume has no device after restart")
	}
	if got := readAt(t, dev, 7, 0); string(got) != "persist" {
		t.Errorf("data after restart %q", got)
	}
	c = second.EC2(t)
	if _, err := c.DetachVolume(context.Background(), &ec2.DetachVolumeInput{VolumeId: &vol}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, vol)
}

// TestFuseVolumesKeepDevicesAcrossRestart: after a restart each attached volume is on the loop device it had,
// whatever order its ID sorts in, so a consumer that reopens its device path finds its own volume.
func TestFuseVolumesKeepDevicesAcrossRestart(t *testing.T) {
	first := startLoopCloud(t, fakecloud.BackendFuse)
	c := first.EC2(t)
	var vols []string
	for range 3 {
		vols = append(vols, availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)}))
	}
	// Attached against the order of their IDs: binding them again in that order would swap their devices.
	slices.Sort(vols)
	slices.Reverse(vols)
	had := map[string]string{}
	for i, vol := range vols {
		attached(t, c, vol, first.Instances[zoneA], fmt.Sprintf("/dev/xvdb%c", 'a'+i))
		had[vol] = first.Server.Backend.DevicePath(vol)
	}
	first.Close()

	second := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendFuse, DataDir: first.DataDir})
	for _, vol := range vols {
		if got := second.Server.Backend.DevicePath(vol); got != had[vol] {
			t.Errorf("%s is on %q after the restart, was on %s", vol, got, had[vol])
		}
	}
}

func writeAt(t *testing.T, dev string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, dev string, n int, off int64) []byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}
