package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/topology"
)

// failingFinder fails the test when a request that validation should refuse gets as far as the device.
type failingFinder struct{ t *testing.T }

func (f failingFinder) Find(context.Context, string, map[string]string) (string, error) {
	f.t.Error("device lookup reached")
	return "", errDeviceNotFound
}

// Lookup and Owns answer as for a volume that is not attached: publish and friends ask them legitimately.
func (failingFinder) Lookup(string) (string, error)     { return "", nil }
func (failingFinder) Owns(string, uint64) (bool, error) { return false, nil }

// testVolumeID is well-formed and names no volume.
const testVolumeID = "vol-0123456789abcdef0"

func newTestNode(t *testing.T) *NodeServer {
	t.Helper()
	n, err := NewNodeServer(NodeOptions{InstanceID: "i-0abc", Zone: "us-east-1a", MaxVolumesPerNode: 25, Devices: failingFinder{t}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewNodeServerOptions(t *testing.T) {
	for _, o := range []NodeOptions{
		{Zone: "z"},
		{InstanceID: "i-1"},
		{InstanceID: "i-1", Zone: "z", MaxVolumesPerNode: -1},
	} {
		if _, err := NewNodeServer(o); err == nil {
			t.Errorf("NewNodeServer(%+v) succeeded", o)
		}
	}
	n, err := NewNodeServer(NodeOptions{InstanceID: "i-1", Zone: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if n.opts.DevDir != DefaultDevDir || n.opts.DeviceWait != DefaultDeviceWait || n.opts.MaxConcurrentFormat != DefaultMaxConcurrentFormat {
		t.Errorf("defaults not applied: %+v", n.opts)
	}
	if n.host == nil || n.devices == nil || n.inFlight == nil || n.state == nil {
		t.Error("host, device finder, in-flight guard or state missing")
	}
}

func TestNodeGetInfo(t *testing.T) {
	n := newTestNode(t)
	info, err := n.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	segs := info.GetAccessibleTopology().GetSegments()
	if info.GetNodeId() != "i-0abc" || info.GetMaxVolumesPerNode() != 25 ||
		segs[topology.ZoneKey] != "us-east-1a" || segs[topology.WellKnownZoneKey] != "us-east-1a" || len(segs) != 2 {
		t.Errorf("NodeGetInfo = %v", info)
	}
}

func TestNodeGetCapabilities(t *testing.T) {
	resp, err := newTestNode(t).NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range resp.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("capability %s missing from %v", want, got)
		}
	}
	if len(got) != 5 {
		t.Errorf("capabilities %v, want exactly 5", got)
	}
}

// TestNodeValidation checks that malformed requests are refused before any device is looked up or mounted.
func TestNodeValidation(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	ext4 := mountCap("ext4", rwo)
	noType := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo}}
	stage := func(id, path string, vc *csi.VolumeCapability, vctx map[string]string) error {
		_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: path, VolumeCapability: vc, VolumeContext: vctx})
		return err
	}
	publish := func(id, stagingPath, targetPath string, vc *csi.VolumeCapability) error {
		_, err := n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: stagingPath, TargetPath: targetPath, VolumeCapability: vc})
		return err
	}
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"stage without volume ID", func() error { return stage("", staging, ext4, nil) }, codes.InvalidArgument},
		{"stage without staging path", func() error { return stage(testVolumeID, "", ext4, nil) }, codes.InvalidArgument},
		{"stage without capability", func() error { return stage(testVolumeID, staging, nil, nil) }, codes.InvalidArgument},
		{"stage without access type", func() error { return stage(testVolumeID, staging, noType, nil) }, codes.InvalidArgument},
		{"stage with btrfs", func() error { return stage(testVolumeID, staging, mountCap("btrfs", rwo), nil) }, codes.InvalidArgument},
		{"stage with multi-node mount", func() error {
			return stage(testVolumeID, staging, mountCap("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), nil)
		}, codes.InvalidArgument},
		{"stage with a non-numeric block size", func() error {
			return stage(testVolumeID, staging, ext4, map[string]string{ContextBlockSize: "4k"})
		}, codes.InvalidArgument},
		{"stage with a flag as inode size", func() error {
			return stage(testVolumeID, staging, ext4, map[string]string{ContextInodeSize: "-O"})
		}, codes.InvalidArgument},
		{"stage xfs with bytes per inode", func() error {
			return stage(testVolumeID, staging, mountCap("xfs", rwo), map[string]string{ContextBytesPerInode: "4096"})
		}, codes.InvalidArgument},
		{"stage xfs with number of inodes", func() error {
			return stage(testVolumeID, staging, mountCap("xfs", rwo), map[string]string{ContextNumberOfInodes: "100"})
		}, codes.InvalidArgument},
		{"publish without volume ID", func() error { return publish("", staging, target, ext4) }, codes.InvalidArgument},
		{"publish without target", func() error { return publish(testVolumeID, staging, "", ext4) }, codes.InvalidArgument},
		{"publish without capability", func() error { return publish(testVolumeID, staging, target, nil) }, codes.InvalidArgument},
		{"publish without staging path", func() error { return publish(testVolumeID, "", target, ext4) }, codes.FailedPrecondition},
		{"publish of an unstaged volume", func() error { return publish(testVolumeID, staging, target, ext4) }, codes.FailedPrecondition},
		{"unpublish without volume ID", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: target})
			return err
		}, codes.InvalidArgument},
		{"unpublish without target", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: testVolumeID})
			return err
		}, codes.InvalidArgument},
		{"unpublish of a missing target", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: testVolumeID, TargetPath: filepath.Join(dir, "missing")})
			return err
		}, codes.OK},
		{"unstage without volume ID", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"unstage without staging path", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: testVolumeID})
			return err
		}, codes.InvalidArgument},
		{"unstage of a missing staging path", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: testVolumeID, StagingTargetPath: filepath.Join(dir, "missing")})
			return err
		}, codes.OK},
		{"stats without volume ID", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: dir})
			return err
		}, codes.InvalidArgument},
		{"stats without path", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: testVolumeID})
			return err
		}, codes.InvalidArgument},
		{"stats of a missing path", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: testVolumeID, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
		{"stats of a path that is not a mount", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: testVolumeID, VolumePath: dir})
			return err
		}, codes.NotFound},
		{"expand without volume ID", func() error {
			_, err := n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumePath: dir})
			return err
		}, codes.InvalidArgument},
		{"expand without path", func() error {
			_, err := n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: testVolumeID})
			return err
		}, codes.InvalidArgument},
		{"expand of a missing path", func() error {
			_, err := n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: testVolumeID, VolumePath: "some/path"})
			return err
		}, codes.NotFound},
		{"expand of a path that is not a mount", func() error {
			_, err := n.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: testVolumeID, VolumePath: dir})
			return err
		}, codes.NotFound},
		{"health without volume ID", func() error {
			_, err := n.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.call(), tc.want, tc.name)
		})
	}
}

// TestNodeInFlight: a concurrent duplicate of an operation on the same volume is Aborted, other volumes go on.
func TestNodeInFlight(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	release, _, ok := n.inFlight.acquire("volume/vol-00000000000000b51")
	if !ok {
		t.Fatal("acquire failed")
	}
	dir := t.TempDir()
	_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "vol-00000000000000b51", StagingTargetPath: dir, VolumeCapability: mountCap("ext4", rwo)})
	wantCode(t, err, codes.Aborted, "stage while busy")
	_, err = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "vol-00000000000000b51", StagingTargetPath: dir, TargetPath: dir + "/t", VolumeCapability: mountCap("ext4", rwo)})
	wantCode(t, err, codes.Aborted, "publish while busy")
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-00000000000000b51", StagingTargetPath: dir})
	wantCode(t, err, codes.Aborted, "unstage while busy")
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-00000000000000a42", StagingTargetPath: dir})
	wantCode(t, err, codes.OK, "unstage of another volume")
	release()
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-00000000000000b51", StagingTargetPath: dir})
	wantCode(t, err, codes.OK, "unstage after release")
}

func TestMkfsOptions(t *testing.T) {
	tests := []struct {
		fs      string
		vctx    map[string]string
		want    []string
		wantErr bool
	}{
		{"ext4", nil, nil, false},
		{"ext4", map[string]string{"unrelated": "x"}, nil, false},
		{"ext4", map[string]string{ContextBlockSize: "4096", ContextInodeSize: "512", ContextBytesPerInode: "16384", ContextNumberOfInodes: "1000"},
			[]string{"-b", "4096", "-I", "512", "-i", "16384", "-N", "1000"}, false},
		{"xfs", map[string]string{ContextBlockSize: "2048", ContextInodeSize: "1024"}, []string{"-b", "size=2048", "-i", "size=1024"}, false},
		{"xfs", map[string]string{ContextBytesPerInode: "16384"}, nil, true},
		{"xfs", map[string]string{ContextNumberOfInodes: "10"}, nil, true},
		{"ext4", map[string]string{ContextBlockSize: "0"}, nil, true},
		{"ext4", map[string]string{ContextInodeSize: "256 -F"}, nil, true},
		{"ext4", map[string]string{ContextNumberOfInodes: "99999999999"}, nil, true},
		{"ext4", map[string]string{ContextBlockSize: "3000"}, nil, true},
		{"ext4", map[string]string{ContextExt4BigAlloc: "true"}, []string{"-O", "bigalloc"}, false},
		{"ext4", map[string]string{ContextExt4ClusterSize: "65536", ContextBlockSize: "4096", ContextExt4BigAlloc: "true"},
			[]string{"-b", "4096", "-O", "bigalloc", "-C", "65536"}, false},
		{"ext4", map[string]string{ContextExt4BigAlloc: "false"}, nil, false},
		{"ext4", map[string]string{ContextExt4BigAlloc: "-O metadata_csum"}, nil, true},
		{"ext4", map[string]string{ContextExt4ClusterSize: "16384"}, nil, true},
		{"ext4", map[string]string{ContextExt4BigAlloc: "false", ContextExt4ClusterSize: "16384"}, nil, true},
		{"ext4", map[string]string{ContextExt4BigAlloc: "true", ContextExt4ClusterSize: "10000"}, nil, true},
		{"ext3", map[string]string{ContextBlockSize: "1024", ContextInodeSize: "256", ContextBytesPerInode: "8192", ContextNumberOfInodes: "500"},
			[]string{"-b", "1024", "-I", "256", "-i", "8192", "-N", "500"}, false},
		{"ext3", map[string]string{ContextExt4BigAlloc: "true"}, nil, true},
		{"xfs", map[string]string{ContextExt4BigAlloc: "true"}, nil, true},
		{"xfs", map[string]string{ContextExt4BigAlloc: "false"}, nil, false},
	}
	for _, tc := range tests {
		got, err := mkfsOptions(tc.fs, tc.vctx)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("mkfsOptions(%s, %v) = %q, %v; want %q, error %v", tc.fs, tc.vctx, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errors.Is(err, errInvalidParameter) {
			t.Errorf("mkfsOptions(%s, %v) error %v is not an invalid parameter", tc.fs, tc.vctx, err)
		}
	}
}

func TestNodeErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", errDeviceHasData), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", errNotStaged), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", errPathInUse), codes.AlreadyExists},
		{fmt.Errorf("x: %w", errVolumeNotAtPath), codes.NotFound},
		{fmt.Errorf("x: %w", errDeviceNotFound), codes.Internal},
		{fmt.Errorf("x: %w: %w", errDeviceNotFound, context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", errOnlineResizeRefused), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", errInvalidParameter), codes.InvalidArgument},
		{errors.New("boom"), codes.Internal},
	}
	for _, tc := range tests {
		wantCode(t, rpcError(tc.err), tc.want, tc.err.Error())
	}
}

// TestMountAtEscapedPaths: mountinfo escapes spaces, tabs, newlines and backslashes in mount points; mountAt
// must find mounts at such paths as the caller names them.
func TestMountAtEscapedPaths(t *testing.T) {
	testutil.SkipUnless(t, rootOnly(), "mounting needs root")
	base := t.TempDir()
	t.Cleanup(func() { testutil.UnmountUnder(t, base) })
	for _, name := range []string{"a b", "a\tb\nc", `a\b`, "plain"} {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(base, p, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount on %q: %v", p, err)
		}
		if _, mounted, err := mountAt(machine, p); err != nil || !mounted {
			t.Errorf("mountAt(%q) = mounted %v, %v; want the bind mount", p, mounted, err)
		}
	}
	if _, mounted, err := mountAt(machine, base); err != nil || mounted {
		t.Errorf("mountAt(%q) = mounted %v, %v; nothing is mounted there", base, mounted, err)
	}
}

func rootOnly() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	return nil
}

func TestParseGeometry(t *testing.T) {
	dumpe2fs := []byte("Filesystem volume name:   <none>\nBlock count:              131072\nReserved block count:     0\nBlock size:               1024\n")
	bs, n, err := parseGeometry(dumpe2fs, ext4BlockSize, 1, ext4BlockCount, 1)
	if err != nil || bs != 1024 || n != 131072 {
		t.Errorf("ext4 geometry = %d, %d, %v", bs, n, err)
	}
	xfsInfo := []byte("meta-data=/dev/loop3 isize=512 agcount=4, agsize=20480 blks\n" +
		"         =                       sectsz=512   attr=2, projid32bit=1\n" +
		"data     =                       bsize=4096   blocks=81920, imaxpct=25\n" +
		"naming   =version 2              bsize=4096   ascii-ci=0, ftype=1\n")
	bs, n, err = parseGeometry(xfsInfo, xfsData, 1, xfsData, 2)
	if err != nil || bs != 4096 || n != 81920 {
		t.Errorf("xfs geometry = %d, %d, %v", bs, n, err)
	}
	if _, _, err := parseGeometry([]byte("nothing"), xfsData, 1, xfsData, 2); err == nil {
		t.Error("parseGeometry of garbage succeeded")
	}
}
