package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// xenVolume is the volume of the Xen tests.
const xenVolume = "vol-0000000000000e0e0"

// publishedAs is the publish context of a volume attached under name, size bytes when published.
func publishedAs(name string, size int64) map[string]string {
	return map[string]string{PublishDevicePath: name, PublishVolumeSize: strconv.FormatInt(size, 10)}
}

// TestFindXenDevice: on Xen instances the volume's device is the one the publish context names (as xvdX or its
// sdX alias), taken only when it checks out: large enough, not another volume's loop or NVMe device, not a
// partition, held by no mount, bind, partition mount or holder.
func TestFindXenDevice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup makes the machine's devices; it returns the device expected, nil for none.
		setup   func(m *fakeMachine) *fakeDevice
		context map[string]string
		refusal string // in the error when nothing is found
	}{
		{"found as xvdX", func(m *fakeMachine) *fakeDevice { return m.xenDevice("ba", 2*gib) },
			publishedAs("/dev/xvdba", 2*gib), ""},
		{"found as xvdX when published as sdX", func(m *fakeMachine) *fakeDevice { return m.xenDevice("f", 2*gib) },
			publishedAs("/dev/sdf", 2*gib), ""},
		{"found as sdX", func(m *fakeMachine) *fakeDevice { return m.addDevice("sdg", 8, 96, 2*gib) },
			publishedAs("/dev/xvdg", 2*gib), ""},
		{"grown since it was published", func(m *fakeMachine) *fakeDevice { return m.xenDevice("ba", 5*gib) },
			publishedAs("/dev/xvdba", 2*gib), ""},
		{"an NVMe device of this volume without its by-id link", func(m *fakeMachine) *fakeDevice {
			d := m.nvmeVolume(xenVolume, 1, 2*gib)
			must(m.t, os.Remove(filepath.Join(m.devDir, "disk", "by-id", ebsNVMePrefix+ebsSerial(xenVolume))))
			m.alias("xvdba", d)
			return d
		}, publishedAs("/dev/xvdba", 2*gib), ""},
		{"too small", func(m *fakeMachine) *fakeDevice { m.xenDevice("ba", gib); return nil },
			publishedAs("/dev/xvdba", 2*gib), "has 1073741824 bytes, the volume had 2147483648"},
		{"another volume's filesystem is mounted from it", func(m *fakeMachine) *fakeDevice {
			d := m.xenDevice("ba", 2*gib)
			m.write(d, FSExt4, -1)
			must(m.t, m.mount(d.node, m.t.TempDir(), FSExt4, nil))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "is mounted at"},
		{"its node is bound elsewhere", func(m *fakeMachine) *fakeDevice {
			d := m.xenDevice("ba", 2*gib)
			target := filepath.Join(m.t.TempDir(), "block")
			must(m.t, os.WriteFile(target, nil, 0o600))
			must(m.t, m.mount(d.node, target, "", []string{"bind"}))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "its device node is bound at"},
		{"a partition of it is mounted", func(m *fakeMachine) *fakeDevice {
			p := m.partition(m.xenDevice("ba", 2*gib), 1)
			m.write(p, FSXFS, -1)
			must(m.t, m.mount(p.node, m.t.TempDir(), FSXFS, nil))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "is mounted at"},
		{"a device mapper device holds it", func(m *fakeMachine) *fakeDevice {
			d := m.xenDevice("ba", 2*gib)
			must(m.t, os.MkdirAll(filepath.Join(m.sys.block.Root, d.name, "holders", "dm-0"), 0o755))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "held by dm-0"},
		{"another volume's loop device", func(m *fakeMachine) *fakeDevice {
			m.alias("xvdba", m.loopVolume("vol-0000000000000beef", 4, 2*gib))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "loop device loop4 of volume vol-0000000000000beef"},
		{"another volume's NVMe device", func(m *fakeMachine) *fakeDevice {
			m.alias("xvdba", m.nvmeVolume("vol-0000000000000beef", 2, 2*gib))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "NVMe device nvme2n1 of volume vol-0000000000000beef"},
		{"a partition", func(m *fakeMachine) *fakeDevice {
			m.alias("xvdba", m.partition(m.xenDevice("c", 8*gib), 1))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "partition xvdc1"},
		{"not a block device", func(m *fakeMachine) *fakeDevice {
			must(m.t, os.WriteFile(filepath.Join(m.devDir, "xvdba"), nil, 0o600))
			return nil
		}, publishedAs("/dev/xvdba", 2*gib), "not a block device"},
		{"no size in the publish context", func(m *fakeMachine) *fakeDevice { m.xenDevice("ba", 2*gib); return nil },
			map[string]string{PublishDevicePath: "/dev/xvdba"}, ""},
		{"a name of another shape", func(m *fakeMachine) *fakeDevice { m.xenDevice("ba", 2*gib); return nil },
			publishedAs("/dev/../dev/xvdba", 2*gib), ""},
		{"a partition's name", func(m *fakeMachine) *fakeDevice { m.partition(m.xenDevice("ba", 2*gib), 1); return nil },
			publishedAs("/dev/xvdba1", gib), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMachine(t)
			want := tc.setup(m)
			n := newFakeEnv(t, m).node
			dev, err := n.devices.Find(context.Background(), xenVolume, tc.context)
			if want == nil {
				if !errors.Is(err, errDeviceNotFound) || !strings.Contains(fmt.Sprint(err), tc.refusal) {
					t.Fatalf("Find = %q, %v; want errDeviceNotFound saying %q", dev, err, tc.refusal)
				}
				if d, ok, _ := n.state.stagedDevice(xenVolume, m.boot); ok {
					t.Errorf("a refused device was recorded: %v", d)
				}
				return
			}
			if err != nil || !strings.HasSuffix(dev, "/"+want.name) && !strings.HasSuffix(dev, "/xvdba") {
				t.Fatalf("Find = %q, %v; want %s", dev, err, want.node)
			}
			// Later calls, without a publish context, find and recognise it.
			if got, err := n.devices.Lookup(xenVolume); err != nil || got != dev {
				t.Errorf("Lookup = %q, %v; want %s", got, err, dev)
			}
			for volume, owns := range map[string]bool{xenVolume: true, "vol-0000000000000beef": false} {
				if got, err := n.devices.Owns(volume, want.rdev); err != nil || got != owns {
					t.Errorf("Owns(%s, its device) = %v, %v; want %v", volume, got, err, owns)
				}
			}
		})
	}
}

// TestXenDeviceRecord: what stage recorded of a Xen device holds in this boot only, and until unstage.
func TestXenDeviceRecord(t *testing.T) {
	t.Parallel()
	m := newFakeMachine(t)
	d := m.xenDevice("ba", 2*gib)
	stateDir := t.TempDir()
	nodeIn := func(boot string) *NodeServer {
		m.boot = boot
		n, err := NewNodeServer(NodeOptions{InstanceID: "i-0fake", Zone: "zone-a", DevDir: m.devDir, DeviceWait: 1, StateDir: stateDir, host: m})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := nodeIn("boot-1")
	if _, err := n.devices.Find(context.Background(), xenVolume, publishedAs("/dev/xvdba", 2*gib)); err != nil {
		t.Fatal(err)
	}
	// The plugin restarts: the record is on disk.
	n = nodeIn("boot-1")
	if dev, err := n.devices.Lookup(xenVolume); err != nil || dev != d.node {
		t.Errorf("Lookup after a restart = %q, %v; want %s", dev, err, d.node)
	}
	// The machine reboots: device names are handed out anew, the record is void.
	n = nodeIn("boot-2")
	if dev, err := n.devices.Lookup(xenVolume); err != nil || dev != "" {
		t.Errorf("Lookup in another boot = %q, %v; want none", dev, err)
	}
	if owns, err := n.devices.Owns(xenVolume, d.rdev); err != nil || owns {
		t.Errorf("Owns in another boot = %v, %v; want false", owns, err)
	}
}

// TestControllerPublishSize: the publish context carries the volume's size, which the node checks a Xen
// device against.
func TestControllerPublishSize(t *testing.T) {
	c, env := newTestController(t)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-xen", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib}, AccessibilityRequirements: &csi.TopologyRequirement{Preferred: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	for range 2 {
		resp, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: env.Instances["us-east-1a"], VolumeCapability: mountRWO})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetPublishContext()[PublishVolumeSize]; got != strconv.FormatInt(3*gib, 10) {
			t.Errorf("publish context %v: size %q, want %d", resp.GetPublishContext(), got, 3*gib)
		}
	}
}

// TestNodeXenVolume stages, publishes, grows, reports on and undoes a volume on a real block device that says
// nothing of whose it is, as a Xen instance's /dev/xvdba: a loop device seen through a sysfs copy that names
// it xvdba and knows no loop binding, its node made under that name in a scratch /dev. The device is found by
// the publish context's name and recognised by what stage recorded.
func TestNodeXenVolume(t *testing.T) {
	t.Parallel()
	testutil.SkipUnless(t, blockdev.Available(), "the Xen volume test stages a real loop device: need root and /dev/loop-control")
	testutil.RequireTools(t, "mkfs.ext4", "losetup", "e2fsck", "resize2fs", "dumpe2fs")
	const size = 64 << 20
	dir := t.TempDir()
	loopDev := testutil.LoopDevice(t, t.TempDir(), size, 512, nil)
	rdev, _, err := machine.blockDevice(loopDev)
	must(t, err)
	devDir, sysDir := filepath.Join(dir, "dev"), filepath.Join(dir, "sys")
	block := filepath.Join(sysDir, "block")
	for _, d := range []string{devDir, filepath.Join(block, "xvdba"), filepath.Join(sysDir, "dev", "block")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(block, "xvdba", "dev"), []byte(devID(rdev)+"\n"), 0o644))
	must(t, os.Symlink(filepath.Join(block, "xvdba"), filepath.Join(sysDir, "dev", "block", devID(rdev))))
	must(t, unix.Mknod(filepath.Join(devDir, "xvdba"), unix.S_IFBLK|0o600, int(rdev)))

	e := newNodeEnv(t, NodeOptions{DevDir: devDir, Sysfs: loopdev.Sysfs{Root: block}, DeviceWait: 1})
	vc := mountCap("ext4", rwo)
	staging, target := e.path("staging"), e.path("target")
	for range 2 {
		_, err := e.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: xenVolume, StagingTargetPath: staging,
			VolumeCapability: vc, PublishContext: publishedAs("/dev/xvdba", size)})
		if err != nil {
			t.Fatalf("stage by the publish context's device name: %v", err)
		}
	}
	e.mustPublish(xenVolume, staging, target, vc, false)
	writeFile(t, filepath.Join(target, "f"), "on xvdba")
	resp, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: xenVolume, VolumePath: target})
	if err != nil || usage(t, resp, csi.VolumeUsage_BYTES).GetTotal() <= 0 {
		t.Fatalf("stats = %v, %v", resp, err)
	}
	_, err = e.node.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: xenVolume, VolumePath: target})
	if err != nil {
		t.Fatalf("expand: %v", err)
	}
	for range 2 {
		e.mustUnpublish(xenVolume, target)
		e.mustUnstage(xenVolume, staging)
	}
	if isMounted(t, staging) {
		t.Fatal("staging path still mounted after unstage")
	}
}
