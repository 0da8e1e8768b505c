package driver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"k8s.io/mount-utils"
	"k8s.io/utils/exec"

	"github.com/diskforge/diskforge/pkg/kernelmount"
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

func (r *restartingNode) unstage(vol string) {
	r.t.Helper()
	if _, err := r.start().NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol,
		StagingTargetPath: filepath.Join(r.dir, "staging")}); err != nil {
		r.t.Fatalf("unstage: %v", err)
	}
	if got := recordedFormats(r.t, r.stateDir); got != 0 {
		r.t.Errorf("%d records of unfinished mkfs after unstage, want none", got)
	}
}

// previousFormat rewrites the records as the previous version wrote them: "<volume> <device>", no boot nor
// device fingerprint.
func (r *restartingNode) previousFormat(vol string, d *fakeDevice) {
	r.t.Helper()
	slots := make([]byte, formatSlots*slotSize)
	copy(slots[3*slotSize:], vol+" "+d.node+"\n")
	must(r.t, os.WriteFile(filepath.Join(r.stateDir, formatFile), slots, 0o600))
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
// data blkid does not recognise is refused; so is the device after an unstage, which removes the record. The
// record is gone afterwards in every case.
func TestNodeUnfinishedMkfsOnlyOnItsDevice(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000a11"
	const dataMark = 8192 // where the fake device's data starts: it survives when nothing formats it
	leaveData := func(m *fakeMachine) func(*fakeDevice) { return func(d *fakeDevice) { m.write(d, "", 4096) } }
	// filledElsewhere: the volume was detached, formatted and filled on another node, and is attached again.
	filledElsewhere := func(r *restartingNode, d *fakeDevice) {
		r.m.rebind(d)
		r.m.write(d, FSExt4, dataMark)
	}
	tests := []struct {
		name   string
		fsType string
		device func(m *fakeMachine) *fakeDevice
		// publish is the publish context of the stages (Xen devices).
		publish map[string]string
		// leave is what the killed mkfs leaves (nil: nothing); between runs after it, before the next stage.
		leave   func(m *fakeMachine) func(*fakeDevice)
		between func(r *restartingNode, d *fakeDevice)
		want    codes.Code
		mkfs    int // runs in all, the killed one included
		data    bool
	}{
		{name: "formatted and filled elsewhere, back as the same loop device", fsType: FSExt4,
			device:  func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			between: filledElsewhere, want: codes.OK, mkfs: 1, data: true},
		{name: "formatted and filled elsewhere, back as the same NVMe device", fsType: FSExt4,
			device:  func(m *fakeMachine) *fakeDevice { return m.nvmeVolume(vol, 1, gib) },
			between: filledElsewhere, want: codes.OK, mkfs: 1, data: true},
		{name: "formatted and filled elsewhere, back as the same NVMe device, no diskseq", fsType: FSXFS,
			device: func(m *fakeMachine) *fakeDevice {
				d := m.nvmeVolume(vol, 1, gib)
				m.noDiskseq(d)
				return d
			},
			between: func(r *restartingNode, d *fakeDevice) { r.m.write(d, FSXFS, dataMark) }, want: codes.OK, mkfs: 1, data: true},
		{name: "another boot", fsType: FSExt4, device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave: leaveData, between: func(r *restartingNode, _ *fakeDevice) { r.m.boot = "boot-2" }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "the loop device bound anew under the same name", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave:  leaveData, between: func(r *restartingNode, d *fakeDevice) { r.m.rebind(d) }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "a Xen device of another size under the same name", fsType: FSExt4,
			device:  func(m *fakeMachine) *fakeDevice { return m.xenDevice("ba", gib) },
			publish: publishedAs("/dev/xvdba", gib),
			leave:   leaveData, between: func(r *restartingNode, d *fakeDevice) { r.m.resize(d, 2*gib) }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "the record written by the previous version", fsType: FSExt4,
			device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave:  leaveData, between: func(r *restartingNode, d *fakeDevice) { r.previousFormat(vol, d) }, want: codes.FailedPrecondition, mkfs: 1},
		{name: "unstaged since", fsType: FSExt4, device: func(m *fakeMachine) *fakeDevice { return m.loopVolume(vol, 1, gib) },
			leave: leaveData, between: func(r *restartingNode, _ *fakeDevice) { r.unstage(vol) }, want: codes.FailedPrecondition, mkfs: 1},
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
				tc.between(r, d)
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

// killingExec runs commands as exec does, but each mkfs is killed (SIGKILL) as soon as its device holds what
// halfway says, as a node crash or an OOM kill would; killed reports whether it was, or mkfs ended first.
type killingExec struct {
	exec.Interface
	halfway func(head []byte) bool
	killed  bool
}

func (k *killingExec) Command(name string, args ...string) exec.Cmd {
	cmd := k.Interface.Command(name, args...)
	if !strings.HasPrefix(name, "mkfs.") {
		return cmd
	}
	return &killedCmd{Cmd: cmd, k: k, name: name, args: args}
}

type killedCmd struct {
	exec.Cmd
	k    *killingExec
	name string
	args []string
}

func (c *killedCmd) CombinedOutput() ([]byte, error) {
	dev := c.args[len(c.args)-1]
	var out bytes.Buffer
	cmd := osexec.Command(c.name, c.args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	head := make([]byte, 8192)
	for {
		select {
		case err := <-done:
			return out.Bytes(), err
		default:
		}
		f, err := os.Open(dev)
		if err == nil {
			_, err = io.ReadFull(f, head)
			f.Close()
		}
		if err == nil && c.k.halfway(head) {
			if cmd.Process.Kill() == nil {
				c.k.killed = true
			}
			err := errors.Join(errors.New("killed half-way"), <-done)
			return out.Bytes(), err
		}
	}
}

// TestNodeRealMkfsKilledHalfway: on loop devices, mkfs.xfs killed once its superblock (marked in progress) is
// written, and mke2fs killed after it wrote its first blocks but no superblock, leave what the next stage of
// the restarted plugin formats again; but when the device holds a complete filesystem by then (formatted and
// filled meanwhile elsewhere, the record still naming this device), nothing is formatted and the data is
// there once staged.
func TestNodeRealMkfsKilledHalfway(t *testing.T) {
	t.Parallel()
	xfsHalfway := func(head []byte) bool { return string(head[:4]) == xfsMagic && head[xfsInProgressOffset] != 0 }
	// mke2fs writes the primary superblock (magic 0xEF53 at 1080) last; blocks after it come first.
	ext4Halfway := func(head []byte) bool {
		return !bytes.Equal(head[4096:], make([]byte, 4096)) && !(head[1080] == 0x53 && head[1081] == 0xef)
	}
	tests := []struct {
		name      string
		fsType    string
		size      int64
		halfway   func([]byte) bool
		filledBy  string // a filesystem made meanwhile, with a file on it; "" for none
		wantFound string // what blkid finds after the kill
	}{
		{"mkfs.xfs killed, formatted again", FSXFS, 4 << 30, xfsHalfway, "", FSXFS},
		{"mkfs.ext4 killed, formatted again", FSExt4, 1 << 30, ext4Halfway, "", ""},
		{"mkfs.xfs killed, an ext4 with data made meanwhile", FSExt4, 4 << 30, xfsHalfway, FSExt4, FSXFS},
		{"mkfs.ext4 killed, an ext4 with data made meanwhile", FSExt4, 1 << 30, ext4Halfway, FSExt4, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			killer := &killingExec{Interface: exec.New(), halfway: tc.halfway}
			mounter := mount.NewSafeFormatAndMount(kernelmount.New(mount.NewWithoutSystemd("")), killer)
			stateDir := t.TempDir()
			e := newNodeEnv(t, NodeOptions{StateDir: stateDir, Mounter: mounter})
			killFS := tc.fsType
			if tc.filledBy != "" {
				killFS = map[bool]string{true: FSXFS, false: FSExt4}[tc.wantFound == FSXFS]
			}
			var id, dev string
			staging := e.path("staging")
			// mkfs may end before its device holds the half-way state: try again on a fresh volume.
			for try := 0; !killer.killed; try++ {
				if try == 5 {
					t.Fatalf("mkfs.%s always finished before it could be killed half-way", killFS)
				}
				id, dev = e.volume(tc.size, nil)
				if err := e.stage(id, staging, mountCap(killFS, rwo), nil); err == nil {
					e.mustUnstage(id, staging)
				} else if !killer.killed {
					t.Fatalf("stage failed without a killed mkfs: %v", err)
				}
			}
			if found := strings.TrimSpace(run(t, "sh", "-c", "blkid -p -s TYPE -o value "+dev+" || true")); found != tc.wantFound {
				t.Fatalf("blkid finds %q on the device of the killed mkfs, want %q", found, tc.wantFound)
			}
			if inProgress, err := machine.xfsInProgress(dev); err != nil || inProgress != (tc.wantFound == FSXFS) {
				t.Fatalf("xfs superblock in progress: %v, %v", inProgress, err)
			}
			if tc.filledBy != "" {
				run(t, "mkfs."+tc.filledBy, "-q", "-F", dev)
				elsewhere := e.path("elsewhere")
				must(t, os.Mkdir(elsewhere, 0o755))
				run(t, "mount", dev, elsewhere)
				writeFile(t, filepath.Join(elsewhere, "data"), "kept")
				run(t, "umount", elsewhere)
			}
			// The plugin restarts, in the same boot, and kubelet retries the stage.
			killer.halfway = func([]byte) bool { return false }
			n, err := NewNodeServer(NodeOptions{InstanceID: "i-0test", Zone: "zone-a", StateDir: stateDir, Mounter: mounter,
				DeviceWait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			e.node = n
			e.mustStage(id, staging, mountCap(tc.fsType, rwo), nil)
			if tc.filledBy != "" {
				if got := readFile(t, filepath.Join(staging, "data")); got != "kept" {
					t.Errorf("the file made meanwhile holds %q", got)
				}
			}
			e.mustUnstage(id, staging)
			if got := recordedFormats(t, stateDir); got != 0 {
				t.Errorf("%d records of unfinished mkfs after the stage, want none", got)
			}
		})
	}
}
