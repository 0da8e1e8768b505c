package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// recordedFormats counts the slots in use in the state directory's formatting records.
func recordedFormats(t *testing.T, stateDir string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(stateDir, formatFile))
	must(t, err)
	n := 0
	for i := 0; i+slotSize <= len(raw); i += slotSize {
		if raw[i] != 0 {
			n++
		}
	}
	return n
}

// restartingNode is a node plugin on a fake machine whose state directory outlives the plugin: each start is
// a restart of the plugin, on the machine's current boot.
type restartingNode struct {
	t        *testing.T
	m        *fakeMachine
	stateDir string
	dir      string
}

func newRestartingNode(t *testing.T, m *fakeMachine) *restartingNode {
	return &restartingNode{t: t, m: m, stateDir: t.TempDir(), dir: t.TempDir()}
}

func (r *restartingNode) start() *NodeServer {
	r.t.Helper()
	n, err := NewNodeServer(NodeOptions{InstanceID: "i-0fake", Zone: "zone-a", DevDir: r.m.devDir, DeviceWait: 1,
		StateDir: r.stateDir, host: r.m})
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *restartingNode) stage(n *NodeServer, vol, fsType string, publishContext map[string]string) error {
	_, err := n.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: vol,
		StagingTargetPath: filepath.Join(r.dir, "staging"), VolumeCapability: mountCap(fsType, rwo), PublishContext: publishContext})
	return err
}

// killMkfs makes the machine's next mkfs fail as a killed one does, after leaving on the device what leave
// does (nil: nothing written yet).
func killMkfs(m *fakeMachine, d *fakeDevice, leave func(d *fakeDevice)) {
	m.formatHook = func(string) error {
		m.formatHook = nil
		if leave != nil {
			leave(d)
		}
		return errors.New("mkfs: signal: killed")
	}
}

// TestNodeUnfinishedMkfsOnlyOnItsDevice: a record of an unfinished mkfs redoes mkfs only on the very device it
// was made for, in the same boot, over what an interrupted mkfs leaves. The volume coming back under the same
// name holding a filesystem and data (the reviewer's case: killed on node A, formatted and filled on node B,
// back on A as the only data volume, /dev/nvme1n1 or a reused loop number), with or without diskseq, is not
// formatted and keeps its data; a record of another boot, of a device that was bound anew or changed size
// under the same path, or of the previous record format, is void: the device is probed like any other, and
// data blkid does not recognise is refused. The record is gone afterwards in every case.
func TestNodeUnfinishedMkfsOnlyOnItsDevice(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000a11"
	const dataMark = 8192 // where the fake device's data starts: it survives when nothing formats it
	leaveData := func(m *fakeMachine) func(*fakeDevice) { return func(d *fakeDevice) { m.write(d, "", 4096) } }
	tests := []struct {
		name   string
		fsType string
		device func(m *fakeMachine) *fakeDevice
		// publish is the publish context of the stages (Xen devices).
		publish map[string]string
		// leave is what the killed mkfs leaves (nil: nothing); between runs after it, before the next stage.
		leave   func(m *fakeMachine) func(*fakeDevice)
		between func(m *fakeMachine, d *fakeDevice)
		want    codes.Code
		mkfs    int // runs in all, the killed one included
		data    bool
	}{
		{name: "formatted and filled elsewhere, back as the same loop device", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			between: func(m *fakeMachine, d *fakeDevice) {
				m.rebind(d)
				m.write(d, FSExt4, dataMark)
			}, want: codes.OK, mkfs: 1, data: true},
		{name: "formatted and filled elsewhere, back as the same NVMe device", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.nvmeVolume(vol, 1, gib) },
			between: func(m *fakeMachine, d *fakeDevice) {
				m.rebind(d)
				m.write(d, FSExt4, dataMark)
			}, want: codes.OK, mkfs: 1, data: true},
		{name: "formatted and filled elsewhere, back as the same NVMe device, no diskseq", fsType: FSXFS,
			device: func(m *fakeMachine) *fakeDevice {
				d := m.nvmeVolume(vol, 1, gib)
				m.noDiskseq(d)
				return d
			},
			between: func(m *fakeMachine, d *fakeDevice) { m.write(d, FSXFS, dataMark) }, want: codes.OK, mkfs: 1, data: true},
		{name: "another boot", fsType: FSExt4, device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave: leaveData, between: func(m *fakeMachine, _ *fakeDevice) { m.boot = "boot-2" }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "the loop device bound anew under the same name", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave:  leaveData, between: func(m *fakeMachine, d *fakeDevice) { m.rebind(d) }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "a Xen device of another size under the same name", fsType: FSExt4,
			device:  func(m *fakeMachine) *fakeDevice { return m.xenDevice("ba", gib) },
			publish: publishedAs("/dev/xvdba", gib),
			leave:   leaveData, between: func(m *fakeMachine, d *fakeDevice) { m.resize(d, 2*gib) }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "mkfs.xfs finished, the plugin killed before removing the record", fsType: FSXFS,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave: func(m *fakeMachine) func(*fakeDevice) {
				return func(d *fakeDevice) { m.write(d, FSXFS, dataMark) }
			}, want: codes.OK, mkfs: 1, data: true},
		{name: "the same device, blkid finds nothing: formatted again", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave:  leaveData, want: codes.OK, mkfs: 2},
		{name: "the same device, an xfs superblock in progress: formatted again", fsType: FSXFS,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave: func(m *fakeMachine) func(*fakeDevice) {
				return func(d *fakeDevice) { m.unfinishedXFS(d) }
			}, want: codes.OK, mkfs: 2},
		{name: "the same Xen device: formatted again", fsType: FSExt4,
			device:  func(m *fakeMachine) *fakeDevice { return m.xenDevice("ba", gib) },
			publish: publishedAs("/dev/xvdba", gib), leave: leaveData, want: codes.OK, mkfs: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeMachine(t)
			d := tc.device(m)
			var leave func(*fakeDevice)
			if tc.leave != nil {
				leave = tc.leave(m)
			}
			killMkfs(m, d, leave)
			r := newRestartingNode(t, m)
			wantCode(t, r.stage(r.start(), vol, tc.fsType, tc.publish), codes.Internal, "stage whose mkfs is killed")
			if got := recordedFormats(t, r.stateDir); got != 1 {
				t.Fatalf("%d records of unfinished mkfs after the killed one, want 1", got)
			}
			if tc.between != nil {
				tc.between(m, d)
			}
			wantCode(t, r.stage(r.start(), vol, tc.fsType, tc.publish), tc.want, "stage after the killed mkfs")
			if got := len(m.ranMkfs()); got != tc.mkfs {
				t.Errorf("mkfs ran %d times, want %d", got, tc.mkfs)
			}
			if tc.data && (d.data != dataMark || d.fsType != tc.fsType) {
				t.Errorf("the volume's data is gone: %s holds %q, data at %d", d.node, d.fsType, d.data)
			}
			if got := recordedFormats(t, r.stateDir); got != 0 {
				t.Errorf("%d records of unfinished mkfs after the stage, want none", got)
			}
		})
	}
}

// TestNodePreviousFormatRecordIsVoid: a record written by an earlier version ("<volume> <device>", no boot
// nor device fingerprint) is read without harm and void: the device it names is probed like any other.
func TestNodePreviousFormatRecordIsVoid(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000a12"
	m := newFakeMachine(t)
	d := m.loopVolume(vol, 1, gib)
	m.write(d, "", 4096)
	r := newRestartingNode(t, m)
	slots := make([]byte, formatSlots*slotSize)
	copy(slots[3*slotSize:], vol+" "+d.node+"\n")
	must(t, os.WriteFile(filepath.Join(r.stateDir, formatFile), slots, 0o600))
	wantCode(t, r.stage(r.start(), vol, FSExt4, nil), codes.FailedPrecondition, "stage with a record of the previous format")
	if got := m.ranMkfs(); len(got) != 0 {
		t.Errorf("mkfs ran on %v", got)
	}
	if got := recordedFormats(t, r.stateDir); got != 0 {
		t.Errorf("%d records of unfinished mkfs after the stage, want none", got)
	}
}

// TestNodeUnstageForgetsUnfinishedMkfs: unstage removes the record of the volume's unfinished mkfs, so that
// what the device holds afterwards is never formatted on the record's word.
func TestNodeUnstageForgetsUnfinishedMkfs(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000a13"
	m := newFakeMachine(t)
	d := m.loopVolume(vol, 1, gib)
	killMkfs(m, d, func(d *fakeDevice) { m.write(d, "", 4096) })
	r := newRestartingNode(t, m)
	n := r.start()
	wantCode(t, r.stage(n, vol, FSExt4, nil), codes.Internal, "stage whose mkfs is killed")
	if _, err := n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol,
		StagingTargetPath: filepath.Join(r.dir, "staging")}); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	if got := recordedFormats(t, r.stateDir); got != 0 {
		t.Errorf("%d records of unfinished mkfs after unstage, want none", got)
	}
	wantCode(t, r.stage(r.start(), vol, FSExt4, nil), codes.FailedPrecondition, "stage after unstage")
	if got := len(m.ranMkfs()); got != 1 {
		t.Errorf("mkfs ran %d times, want 1 (the killed one)", got)
	}
}
