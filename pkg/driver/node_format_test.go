package driver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/mount-utils"
	"k8s.io/utils/exec"

	"github.com/diskforge/diskforge/pkg/kernelmount"
)

// TestNodeFormatRules: a device is formatted only when blkid finds nothing on it and it reads as zeros where
// blkid looks, or when it holds the node's own unfinished mkfs of the volume on that device; a device blkprobe
// proves blank needs no blkid run only when the installed blkid is a release blkprobe was measured on.
func TestNodeFormatRules(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000f01"
	tests := []struct {
		name     string
		blkid    string // what blkid -V prints
		size     int64
		fsType   string // on the device
		data     int64  // first non-zero byte, -1 for zeros
		record   string // the device of an unfinished mkfs of the volume: "self" for its own
		readOnly bool
		want     codes.Code
		message  string // in the error
		mkfs     int
		blkidRun int
	}{
		{name: "blank, measured blkid", blkid: fakeBlkidMeasured, size: gib, data: -1, want: codes.OK, mkfs: 1},
		{name: "blank, other blkid", blkid: fakeBlkidUnmeasured, size: gib, data: -1, want: codes.OK, mkfs: 1, blkidRun: 1},
		{name: "data, measured blkid", blkid: fakeBlkidMeasured, size: gib, data: 8192, want: codes.FailedPrecondition,
			message: "first non-zero byte where blkid looks is at offset 8192", blkidRun: 1},
		{name: "data, other blkid", blkid: fakeBlkidUnmeasured, size: gib, data: 8192, want: codes.FailedPrecondition,
			message: "offset 8192", blkidRun: 1},
		{name: "blank below the envelope", blkid: fakeBlkidMeasured, size: 32 << 20, data: -1, want: codes.OK, mkfs: 1, blkidRun: 1},
		{name: "data below the envelope", blkid: fakeBlkidMeasured, size: 32 << 20, data: 20 << 20, want: codes.FailedPrecondition,
			message: "offset 20971520", blkidRun: 1},
		{name: "ext4", blkid: fakeBlkidMeasured, size: gib, fsType: FSExt4, data: 0, want: codes.OK, blkidRun: 1},
		{name: "xfs where ext4 is asked", blkid: fakeBlkidMeasured, size: gib, fsType: FSXFS, data: 0, want: codes.FailedPrecondition,
			message: `holds "xfs"`, blkidRun: 1},
		{name: "a partition table", blkid: fakeBlkidMeasured, size: gib, fsType: "gpt", data: 0, want: codes.FailedPrecondition,
			message: `holds "gpt"`, blkidRun: 1},
		{name: "data from the volume's unfinished mkfs on this device", blkid: fakeBlkidMeasured, size: gib, data: 4096, record: "self",
			want: codes.OK, mkfs: 1, blkidRun: 1},
		{name: "data, an unfinished mkfs recorded on another device", blkid: fakeBlkidMeasured, size: gib, data: 4096, record: "/dev/loop9",
			want: codes.FailedPrecondition, message: "void: it was made on /dev/loop9", blkidRun: 1},
		{name: "ext4, the volume's unfinished mkfs recorded on this device", blkid: fakeBlkidMeasured, size: gib, fsType: FSExt4, data: 0,
			record: "self", want: codes.OK, blkidRun: 1},
		{name: "ext4, an unfinished mkfs recorded on another device", blkid: fakeBlkidMeasured, size: gib, fsType: FSExt4, data: 0,
			record: "/dev/loop9", want: codes.OK, blkidRun: 1},
		{name: "blank, staged read-only", blkid: fakeBlkidMeasured, size: gib, data: -1, readOnly: true, want: codes.FailedPrecondition,
			message: "cannot be formatted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeMachine(t)
			m.version = tc.blkid
			d := m.loopVolume(vol, 1, tc.size)
			m.write(d, tc.fsType, tc.data)
			e := newFakeEnv(t, m)
			if tc.record != "" {
				rec, err := e.node.formatTarget(d.node)
				must(t, err)
				if tc.record != "self" {
					rec.device = tc.record
				}
				must(t, e.node.state.startFormat(vol, rec))
			}
			var flags []string
			if tc.readOnly {
				flags = []string{"ro"}
			}
			staging := e.path("staging")
			err := e.stage(vol, staging, mountCap(FSExt4, rwo, flags...), nil)
			if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.message) {
				t.Fatalf("stage: %v; want %s saying %q", err, tc.want, tc.message)
			}
			if tc.want != codes.OK && !strings.Contains(status.Convert(err).Message(), d.node) {
				t.Errorf("the refusal does not name the device %s: %v", d.node, err)
			}
			if got := len(m.ranMkfs()); got != tc.mkfs {
				t.Errorf("mkfs ran %d times, want %d", got, tc.mkfs)
			}
			if got := m.ranBlkid(); got != tc.blkidRun {
				t.Errorf("blkid ran %d times, want %d", got, tc.blkidRun)
			}
			if mounted := len(m.mountsAt(staging)) == 1; mounted != (tc.want == codes.OK) {
				t.Errorf("staging path mounted: %v", mounted)
			}
			// A staged volume leaves no record of an unfinished mkfs behind, and a void record is removed.
			if rec, ok, _ := e.node.state.unfinishedFormat(vol); ok {
				t.Errorf("record of an unfinished mkfs after the stage: %+v", rec)
			}
		})
	}
}

// TestNodeRedoesFailedMkfs: mkfs that fails after writing (as mke2fs and mkfs.xfs write much before their
// superblock) leaves data blkid does not recognise; the next stage, by a restarted plugin, formats it again,
// since the node recorded that it had started mkfs of the volume on that device. Another volume's device with
// the same data is refused.
func TestNodeRedoesFailedMkfs(t *testing.T) {
	t.Parallel()
	const vol, other = "vol-00000000000000f02", "vol-00000000000000f03"
	m := newFakeMachine(t)
	d := m.loopVolume(vol, 1, gib)
	o := m.loopVolume(other, 2, gib)
	m.write(o, "", 4096)
	stateDir := t.TempDir()
	node := func() *nodeEnv {
		n, err := NewNodeServer(NodeOptions{InstanceID: "i-0fake", Zone: "zone-a", DevDir: m.devDir, DeviceWait: 1, StateDir: stateDir, host: m})
		if err != nil {
			t.Fatal(err)
		}
		return &nodeEnv{t: t, node: n, dir: t.TempDir()}
	}
	m.formatHook = func(dev string) error {
		m.write(d, "", 4096)
		return errors.New("mkfs.ext4: killed")
	}
	e := node()
	staging := e.path("staging")
	wantCode(t, e.stage(vol, staging, mountCap(FSExt4, rwo), nil), codes.Internal, "stage whose mkfs fails")
	m.formatHook = nil
	e = node()
	e.mustStage(vol, staging, mountCap(FSExt4, rwo), nil)
	if got := m.ranMkfs(); len(got) != 2 || got[1] != d.node {
		t.Errorf("mkfs ran on %v, want twice on %s", got, d.node)
	}
	if rec, ok, err := node().node.state.unfinishedFormat(vol); ok || err != nil {
		t.Errorf("record of the finished mkfs still there after a restart: %+v, %v", rec, err)
	}
	wantCode(t, e.stage(other, e.path("other"), mountCap(FSExt4, rwo), nil), codes.FailedPrecondition, "stage of another volume holding data")
}

// gatedExec runs commands as exec does, but a mkfs waits for the test: started gets its device, and it runs
// once finish is closed.
type gatedExec struct {
	exec.Interface
	started chan string
	finish  chan struct{}
	mu      sync.Mutex
	runs    int
}

func (g *gatedExec) Command(name string, args ...string) exec.Cmd {
	cmd := g.Interface.Command(name, args...)
	if !strings.HasPrefix(name, "mkfs.") {
		return cmd
	}
	return &gatedCmd{Cmd: cmd, g: g, dev: args[len(args)-1]}
}

type gatedCmd struct {
	exec.Cmd
	g   *gatedExec
	dev string
}

func (c *gatedCmd) CombinedOutput() ([]byte, error) {
	c.g.mu.Lock()
	c.g.runs++
	c.g.mu.Unlock()
	c.g.started <- c.dev
	<-c.g.finish
	return c.Cmd.CombinedOutput()
}

// TestNodeStageRetryDuringMkfs: a stage whose mkfs outlives the call's deadline (kubelet gives up and retries)
// keeps the volume until it returns: the retry during the mkfs is Aborted, a single mkfs runs, and the retry
// after it finds the volume staged.
func TestNodeStageRetryDuringMkfs(t *testing.T) {
	t.Parallel()
	g := &gatedExec{Interface: exec.New(), started: make(chan string, 2), finish: make(chan struct{})}
	finished := sync.OnceFunc(func() { close(g.finish) })
	t.Cleanup(finished)
	e := newNodeEnv(t, NodeOptions{Mounter: mount.NewSafeFormatAndMount(kernelmount.New(mount.NewWithoutSystemd("")), g)})
	id, dev := e.volume(ext4Size, nil)
	req := &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: e.path("staging"), VolumeCapability: mountCap(FSExt4, rwo)}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := e.node.NodeStageVolume(ctx, req)
		first <- err
	}()
	if got := <-g.started; got != dev {
		t.Fatalf("mkfs started on %s, want %s", got, dev)
	}
	<-ctx.Done() // the first call's deadline has passed; its mkfs has not finished
	retry := make(chan error, 1)
	go func() {
		_, err := e.node.NodeStageVolume(context.Background(), req)
		retry <- err
	}()
	select {
	case err := <-retry:
		wantCode(t, err, codes.Aborted, "retry while the first mkfs runs")
	case second := <-g.started:
		t.Errorf("a second mkfs started on %s while the first ran", second)
	}
	finished()
	if err := <-first; err != nil {
		t.Errorf("the first stage, after its deadline: %v", err)
	}
	e.mustStage(id, req.StagingTargetPath, req.VolumeCapability, nil)
	if g.runs != 1 {
		t.Errorf("mkfs ran %d times, want 1", g.runs)
	}
	e.mustUnstage(id, req.StagingTargetPath)
}

// TestNodeRefusesUnrecognisedData: on real devices, data blkid recognises nothing in (a raw block volume, a
// snapshot of one) is neither formatted nor mounted, whatever its size, and the answer names the device and
// where the data starts; the volume's own unfinished mkfs (mkfs.ext4 whose superblock was not written yet) is
// formatted again by a restarted plugin, since it recorded the mkfs; a fresh small device is formatted.
func TestNodeRefusesUnrecognisedData(t *testing.T) {
	t.Parallel()
	writeAt := func(off int64) func(t *testing.T, file string) {
		return func(t *testing.T, file string) {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(bytes.Repeat([]byte{0x5a}, 512), off)
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// unfinishedMkfs is mkfs.ext4 without its primary superblock: what a killed mke2fs leaves.
	unfinishedMkfs := func(t *testing.T, file string) {
		run(t, "mkfs.ext4", "-q", "-F", file)
		f, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(make([]byte, 4096), 0)
		if err := errors.Join(err, f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		size    int64
		prepare func(t *testing.T, file string)
		record  bool // the node recorded an unfinished mkfs of the volume on its device
		want    codes.Code
		offset  string
	}{
		{"data at the start", 128 * mib, writeAt(64 << 10), false, codes.FailedPrecondition, "offset 65536"},
		{"data near the end", 128 * mib, writeAt(128*mib - 8192), false, codes.FailedPrecondition, "offset 134209536"},
		{"data on a small device", 16 * mib, writeAt(9 * mib), false, codes.FailedPrecondition, "offset 9437184"},
		{"a small fresh device", 16 * mib, nil, false, codes.OK, ""},
		{"an unfinished mkfs without a record", 128 * mib, unfinishedMkfs, false, codes.FailedPrecondition, "offset"},
		{"the volume's unfinished mkfs", 128 * mib, unfinishedMkfs, true, codes.OK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stateDir := t.TempDir()
			e := newNodeEnv(t, NodeOptions{StateDir: stateDir})
			var prepare func(string)
			if tc.prepare != nil {
				prepare = func(file string) { tc.prepare(t, file) }
			}
			id, dev := e.volume(tc.size, prepare)
			if tc.prepare != nil {
				if out := run(t, "sh", "-c", "blkid -p "+dev+"; echo exit $?"); !strings.Contains(out, "exit 2") {
					t.Fatalf("blkid finds something on the prepared device: %s", out)
				}
			}
			if tc.record {
				rec, err := e.node.formatTarget(dev)
				must(t, err)
				must(t, e.node.state.startFormat(id, rec))
				// The plugin restarts.
				n, err := NewNodeServer(NodeOptions{InstanceID: "i-0test", Zone: "zone-a", StateDir: stateDir, DeviceWait: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				e.node = n
			}
			before := readHead(t, dev)
			staging := e.path("staging")
			err := e.stage(id, staging, mountCap(FSExt4, rwo), nil)
			wantCode(t, err, tc.want, "stage")
			if tc.want == codes.OK {
				e.mustUnstage(id, staging)
				return
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, dev) || !strings.Contains(msg, tc.offset) {
				t.Errorf("refusal %q does not name %s and %q", msg, dev, tc.offset)
			}
			if isMounted(t, staging) {
				t.Error("staging path mounted")
			}
			if !bytes.Equal(readHead(t, dev), before) {
				t.Error("the device's first MiB changed")
			}
		})
	}
}
