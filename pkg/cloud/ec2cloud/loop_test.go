package ec2cloud

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestAttachBindsLoopDevice: on fakecloud's loop backend, what AttachDisk returns is enough for the node to
// find the device: the volume ID names the backing file <dataDir>/volumes/<volumeID>.img of a bound loop
// device. Needs root and loop devices; skipped otherwise.
func TestAttachBindsLoopDevice(t *testing.T) {
	testutil.SkipUnless(t, blockdev.Available(), "loop devices are needed")
	e := newTestEnv(t, fakecloudtest.Options{Backend: fakecloud.BackendLoop})
	d := e.mustCreate(t, "pvc-loop", cloud.DiskOptions{})
	t.Cleanup(func() {
		// Release the device even if the test failed half-way; deleting the volume frees its file.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.fc.Server.Backend.Detach(ctx, d.ID, true)
		_ = e.DeleteDisk(ctx, d.ID)
	})
	a, err := e.AttachDisk(testCtx(t), d.ID, fakecloudtest.InstanceA)
	if err != nil {
		t.Fatal(err)
	}
	backing := filepath.Join(e.fc.DataDir, "volumes", a.VolumeID+".img")
	dev, err := blockdev.FindLoopDevice(backing)
	if err != nil || dev == "" {
		t.Fatalf("no loop device for %s (attachment %+v): %q, %v", backing, a, dev, err)
	}
	t.Logf("attachment %+v is %s", a, dev)
	if err := e.DetachDisk(testCtx(t), d.ID, fakecloudtest.InstanceA); err != nil {
		t.Fatal(err)
	}
	if dev, err := blockdev.FindLoopDevice(backing); err != nil || dev != "" {
		t.Errorf("after detach the loop device is %q, %v; want none", dev, err)
	}
}
