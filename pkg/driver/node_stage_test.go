package driver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/diskforge/diskforge/internal/testutil"
)

// TestNodeFilesystemLifecycle stages, publishes, unpublishes and unstages ext4, xfs and ext3 volumes, every call
// twice, then stages again to check that the data survives (nothing is formatted twice).
func TestNodeFilesystemLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fs   string
		size int64
	}{{"ext4", ext4Size}, {"xfs", xfsSize}, {"ext3", ext4Size}} {
		t.Run(tc.fs, func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, NodeOptions{})
			id, dev := e.volume(tc.size, nil)
			vc := mountCap(tc.fs, rwo)
			staging, target := e.path("staging"), e.path("pods/pod1/target")
			// As kubelet does: it makes the staging directory and the target's parent, the driver the target.
			for _, d := range []string{staging, filepath.Dir(target)} {
				if err := os.MkdirAll(d, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				e.mustStage(id, staging, vc, nil)
			}
			mi, mounted, err := mountAt(machine, staging)
			if err != nil || !mounted || mi.FSType != tc.fs {
				t.Fatalf("staging path: mounted %v, fs %q, err %v", mounted, mi.FSType, err)
			}
			if rdev, _, _ := machine.blockDevice(dev); mountDev(mi) != rdev {
				t.Fatalf("staging path is mounted from %d:%d, not %s", mi.Major, mi.Minor, dev)
			}
			for range 2 {
				e.mustPublish(id, staging, target, vc, false)
			}
			writeFile(t, filepath.Join(target, "data"), "hello "+tc.fs)
			if got := readFile(t, filepath.Join(staging, "data")); got != "hello "+tc.fs {
				t.Fatalf("staging path sees %q", got)
			}
			for range 2 {
				e.mustUnpublish(id, target)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("target %s still exists after unpublish: %v", target, err)
			}
			for range 2 {
				e.mustUnstage(id, staging)
			}
			if isMounted(t, staging) {
				t.Fatal("staging path still mounted after unstage")
			}
			if st, err := os.Stat(staging); err != nil || !st.IsDir() {
				t.Fatalf("staging directory removed by unstage: %v", err)
			}

			// The filesystem is found again, not formatted again.
			e.mustStage(id, staging, vc, nil)
			if got := readFile(t, filepath.Join(staging, "data")); got != "hello "+tc.fs {
				t.Fatalf("data after re-stage: %q", got)
			}
			e.mustUnstage(id, staging)
		})
	}
}

// TestNodeFormatOptions checks that the volume context's format options reach mkfs.
func TestNodeFormatOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fs      string
		size    int64
		vctx    map[string]string
		inspect func(e *nodeEnv, dev, staging string) string
		want    []string // regular expressions the inspection output must match
	}{
		{"ext4 block and inode size, bytes per inode", "ext4", ext4Size, map[string]string{ContextBlockSize: "4096", ContextInodeSize: "512", ContextBytesPerInode: "65536"},
			func(e *nodeEnv, dev, _ string) string { return run(e.t, "dumpe2fs", "-h", dev) },
			// 64 MiB / 65536 bytes per inode = 1024 inodes.
			[]string{`(?m)^Block size:\s+4096$`, `(?m)^Inode size:\s+512$`, `(?m)^Inode count:\s+1024$`}},
		{"ext4 number of inodes", "ext4", ext4Size, map[string]string{ContextNumberOfInodes: "3000"},
			func(e *nodeEnv, dev, _ string) string { return run(e.t, "dumpe2fs", "-h", dev) },
			// mke2fs rounds up to fill whole inode table blocks in every group.
			[]string{`(?m)^Inode count:\s+(3\d\d\d)$`}},
		{"xfs block and inode size", "xfs", xfsSize, map[string]string{ContextBlockSize: "2048", ContextInodeSize: "1024"},
			func(e *nodeEnv, _, staging string) string { return run(e.t, "xfs_info", staging) },
			[]string{`isize=1024`, `(?m)^data\s+=\s+bsize=2048\s`}},
		// Clustered allocation: a 16 KiB database page is never split across two allocations.
		{"ext4 bigalloc and cluster size", "ext4", ext4Size,
			map[string]string{ContextExt4BigAlloc: "true", ContextExt4ClusterSize: "16384", ContextBlockSize: "4096"},
			func(e *nodeEnv, dev, staging string) string {
				return run(e.t, "dumpe2fs", "-h", dev) + run(e.t, "tune2fs", "-l", dev) + "mounted as " + mountedFSType(e.t, staging)
			},
			[]string{`(?m)^Filesystem features:.*\sbigalloc(\s|$)`, `(?m)^Cluster size:\s+16384$`, `(?m)^Block size:\s+4096$`,
				`mounted as ext4$`}},
		{"ext4 bigalloc, mke2fs's cluster size", "ext4", ext4Size, map[string]string{ContextExt4BigAlloc: "true"},
			func(e *nodeEnv, dev, _ string) string { return run(e.t, "dumpe2fs", "-h", dev) },
			[]string{`(?m)^Filesystem features:.*\sbigalloc(\s|$)`, `(?m)^Cluster size:\s+\d+$`}},
		// ext3: a journal, no extents (mkfs.ext3), mounted as ext3.
		{"ext3 block size", "ext3", ext4Size, map[string]string{ContextBlockSize: "1024"},
			func(e *nodeEnv, dev, staging string) string {
				out := run(e.t, "dumpe2fs", "-h", dev)
				if regexp.MustCompile(`(?m)^Filesystem features:.*\s(extents?|flex_bg|64bit)(\s|$)`).MatchString(out) {
					e.t.Errorf("ext3 with ext4's features:\n%s", out)
				}
				return out + "mounted as " + mountedFSType(e.t, staging)
			},
			[]string{`(?m)^Filesystem features:.*\shas_journal\s`, `(?m)^Block size:\s+1024$`, `mounted as ext3$`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, NodeOptions{})
			id, dev := e.volume(tc.size, nil)
			staging := e.path("staging")
			e.mustStage(id, staging, mountCap(tc.fs, rwo), tc.vctx)
			out := tc.inspect(e, dev, staging)
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("format options %v: %q not found in:\n%s", tc.vctx, re, out)
				}
			}
			e.mustUnstage(id, staging)
		})
	}
}

// TestNodeLegacyXFS: with LegacyXFS the node formats xfs without the features kernels up to 5.4 cannot mount,
// as far as the installed mkfs.xfs knows them (xfs_info: reflink=0, bigtime=0, inobtcount=0, nrext64=0), beside a
// class's inode size, and the volume mounts and takes data; without it mkfs.xfs's defaults stand (reflink=1
// from xfsprogs 5.1), so the check sees a difference.
func TestNodeLegacyXFS(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{true, false} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, NodeOptions{LegacyXFS: legacy})
			id, _ := e.volume(xfsSize, nil)
			staging := e.path("staging")
			e.mustStage(id, staging, mountCap(FSXFS, rwo), map[string]string{ContextInodeSize: "512"})
			if got := mountedFSType(t, staging); got != FSXFS {
				t.Fatalf("staging path mounted as %s", got)
			}
			writeFile(t, filepath.Join(staging, "data"), "legacy")
			info := run(t, "xfs_info", staging)
			if !strings.Contains(info, "isize=512") {
				t.Errorf("the class's inode size is lost:\n%s", info)
			}
			if !legacy {
				if e.node.legacyXFS != nil {
					t.Errorf("legacy options %q without LegacyXFS", e.node.legacyXFS)
				}
				if !strings.Contains(info, "reflink=1") {
					t.Errorf("mkfs.xfs's default reflink=1 not seen:\n%s", info)
				}
				e.mustUnstage(id, staging)
				return
			}
			opts := strings.Join(e.node.legacyXFS, " ")
			t.Logf("legacy options of this mkfs.xfs: %q", opts)
			checked := 0
			for _, f := range legacyXFSFeatures {
				if !strings.Contains(opts, f.name+"=0") {
					continue // a feature this mkfs.xfs does not know, and never makes
				}
				checked++
				if !regexp.MustCompile(`\b` + f.name + `=0\b`).MatchString(info) {
					t.Errorf("%s not off:\n%s", f.name, info)
				}
			}
			if checked == 0 {
				t.Errorf("this mkfs.xfs knows none of %v", legacyXFSFeatures)
			}
			e.mustUnstage(id, staging)
			e.mustStage(id, staging, mountCap(FSXFS, rwo), nil)
			if got := readFile(t, filepath.Join(staging, "data")); got != "legacy" {
				t.Errorf("data after a second stage: %q", got)
			}
			e.mustUnstage(id, staging)
		})
	}
}

// TestMkfsXFSKnows: the probe tells an option mkfs.xfs knows from one it does not, and writes nothing.
func TestMkfsXFSKnows(t *testing.T) {
	t.Parallel()
	testutil.RequireTools(t, "mkfs.xfs")
	h := &realHost{mounter: mount.NewSafeFormatAndMount(mount.New(""), utilexec.New())}
	for _, tc := range []struct {
		flag, name string
		want       bool
	}{{"-m", "reflink", true}, {"-i", "sparse", true}, {"-m", "nosuchfeature", false}, {"-i", "nosuchfeature", false}} {
		if got, err := h.mkfsXFSKnows(tc.flag, tc.name); err != nil || got != tc.want {
			t.Errorf("mkfsXFSKnows(%s, %s) = %v, %v; want %v", tc.flag, tc.name, got, err, tc.want)
		}
	}
}

// TestNodeRefusesForeignData: a device holding another filesystem, a partition table or a RAID member's
// superblock is neither formatted nor mounted, and its bytes stay as they were.
func TestNodeRefusesForeignData(t *testing.T) {
	t.Parallel()
	mkfs := func(fs string) func(t *testing.T, file string) {
		return func(t *testing.T, file string) { run(t, "mkfs."+fs, "-q", "-F", file) }
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, file string)
		stageAs string
	}{
		{"xfs staged as ext4", func(t *testing.T, file string) { run(t, "mkfs.xfs", "-q", "-f", file) }, "ext4"},
		{"ext4 staged as xfs", mkfs("ext4"), "xfs"},
		{"partition table staged as ext4", func(t *testing.T, file string) {
			testutil.RequireTools(t, "sfdisk")
			runIn(t, "label: gpt\n,16MiB\n", "sfdisk", "-q", file)
		}, "ext4"},
		// Only the device's end is written: the quick blank check must not take it for a blank device.
		{"md superblock at the end staged as ext4", func(t *testing.T, file string) {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			// MD 0.90: magic a92b4efc, version 0.90, in the last 64 KiB-aligned 64 KiB.
			_, err = f.WriteAt([]byte{0xfc, 0x4e, 0x2b, 0xa9, 0, 0, 0, 0, 90, 0, 0, 0}, xfsSize&^(64<<10-1)-64<<10)
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
		}, "ext4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, NodeOptions{})
			id, dev := e.volume(xfsSize, func(file string) { tc.prepare(t, file) })
			before := readHead(t, dev)
			probe := run(t, "blkid", "-p", "-o", "export", dev)
			staging := e.path("staging")
			err := e.stage(id, staging, mountCap(tc.stageAs, rwo), nil)
			wantCode(t, err, codes.FailedPrecondition, "stage over foreign data")
			if isMounted(t, staging) {
				t.Fatal("staging path mounted")
			}
			if !bytes.Equal(readHead(t, dev), before) {
				t.Fatal("the device's first MiB changed")
			}
			if after := run(t, "blkid", "-p", "-o", "export", dev); after != probe {
				t.Fatalf("blkid before:\n%s\nafter:\n%s", probe, after)
			}
		})
	}
}

// TestNodePublishReadOnly: a read-only publication refuses writes while the staging path and a read-write
// publication of the same volume accept them; republishing with the other mode is refused.
func TestNodePublishReadOnly(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	id, _ := e.volume(ext4Size, nil)
	vc := mountCap("ext4", rwo, "noatime")
	staging, ro, rw := e.path("staging"), e.path("ro"), e.path("rw")
	e.mustStage(id, staging, vc, nil)
	for range 2 {
		e.mustPublish(id, staging, ro, vc, true)
	}
	e.mustPublish(id, staging, rw, vc, false)

	err := os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o600)
	if !errors.Is(err, unix.EROFS) {
		t.Fatalf("write to the read-only publication: %v, want EROFS", err)
	}
	writeFile(t, filepath.Join(rw, "f"), "x")
	if got := readFile(t, filepath.Join(ro, "f")); got != "x" {
		t.Fatalf("read-only publication reads %q", got)
	}
	mi, _, err := mountAt(machine, rw)
	if err != nil || !strings.Contains(mi.Options, "noatime") {
		t.Errorf("mount flags not applied to the publication: %v, %v", mi.Options, err)
	}
	wantCode(t, e.publish(id, staging, ro, vc, false), codes.AlreadyExists, "republish read-only target read-write")
	e.mustUnpublish(id, ro)
	e.mustUnpublish(id, rw)
	e.mustUnstage(id, staging)
}

// TestNodeSingleWriter: a SINGLE_NODE_SINGLE_WRITER volume is published at one target only.
func TestNodeSingleWriter(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	for _, block := range []bool{false, true} {
		id, _ := e.volume(ext4Size, nil)
		vc := mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
		if block {
			vc = blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
		}
		staging, t1, t2 := e.path(id+"/staging"), e.path(id+"/t1"), e.path(id+"/t2")
		must(t, os.MkdirAll(staging, 0o750))
		e.mustStage(id, staging, vc, nil)
		e.mustPublish(id, staging, t1, vc, false)
		e.mustPublish(id, staging, t1, vc, false)
		wantCode(t, e.publish(id, staging, t2, vc, false), codes.FailedPrecondition, "second publication")
		e.mustUnpublish(id, t1)
		e.mustPublish(id, staging, t2, vc, false)
		e.mustUnpublish(id, t2)
		e.mustUnstage(id, staging)
	}
}

// TestNodeBlockVolume: a block volume is not mounted at stage; publish binds the device node onto a file.
func TestNodeBlockVolume(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	id, dev := e.volume(ext4Size, nil)
	vc := blockCap(rwo)
	staging, target := e.path("staging"), e.path("publish/pv/pod")
	for _, d := range []string{staging, filepath.Dir(target)} {
		must(t, os.MkdirAll(d, 0o750))
	}
	for range 2 {
		e.mustStage(id, staging, vc, nil)
	}
	if isMounted(t, staging) {
		t.Fatal("block stage mounted something on the staging path")
	}
	for range 2 {
		e.mustPublish(id, staging, target, vc, false)
	}
	want, _, _ := machine.blockDevice(dev)
	got, isBlock, err := machine.blockDevice(target)
	if err != nil || !isBlock || got != want {
		t.Fatalf("target: block %v, rdev %d, err %v; want the device %s (%d)", isBlock, got, err, dev, want)
	}
	if size, err := machine.deviceSize(target); err != nil || size != ext4Size {
		t.Fatalf("target size %d, %v; want %d", size, err, ext4Size)
	}
	// Writes through the target reach the device.
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("block!"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if head := readHead(t, dev); string(head[4096:4102]) != "block!" {
		t.Fatal("write through the target not visible on the device")
	}
	for range 2 {
		e.mustUnpublish(id, target)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target still exists: %v", err)
	}
	for range 2 {
		e.mustUnstage(id, staging)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return runIn(t, "", name, args...)
}

func runIn(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// readHead reads the first MiB of a device, bypassing nothing: the device's own page cache is what mount and
// blkid see too.
func readHead(t *testing.T, dev string) []byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, mib)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNodeFilesystemFromVolumeContext: a capability that names no filesystem takes the one CreateVolume
// recorded from the StorageClass, as csi-sanity and statically provisioned volumes send it.
func TestNodeFilesystemFromVolumeContext(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, NodeOptions{})
	id, dev := e.volume(xfsSize, nil)
	staging := e.path("staging")
	e.mustStage(id, staging, mountCap("", rwo), map[string]string{ParamFSType: FSXFS})
	if got := strings.TrimSpace(run(t, "blkid", "-p", "-o", "value", "-s", "TYPE", dev)); got != FSXFS {
		t.Errorf("device formatted %q, want xfs from the volume context", got)
	}
	e.mustUnstage(id, staging)
}

func TestStageFilesystem(t *testing.T) {
	cases := []struct {
		capability string
		volCtx     map[string]string
		want       string
		code       codes.Code
	}{
		{"", nil, DefaultFS, codes.OK},
		{"xfs", map[string]string{ParamFSType: "ext4"}, "xfs", codes.OK},
		{"", map[string]string{ParamFSType: "xfs"}, "xfs", codes.OK},
		{"", map[string]string{ParamFSType: "btrfs"}, "", codes.InvalidArgument},
		{"", map[string]string{ParamFSType: "ext3"}, "ext3", codes.OK},
		{"ext3", nil, "ext3", codes.OK},
	}
	for _, tc := range cases {
		got, err := stageFilesystem(tc.capability, tc.volCtx)
		if got != tc.want || status.Code(err) != tc.code {
			t.Errorf("stageFilesystem(%q, %v) = %q, %v; want %q, %s", tc.capability, tc.volCtx, got, err, tc.want, tc.code)
		}
	}
}
