package blockdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

func requireFuse(t testing.TB) {
	t.Helper()
	testutil.SkipUnless(t, Available(), "fuse backend needs root and /dev/loop-control")
	testutil.SkipUnless(t, fuseblock.Available(), "fuse backend needs /dev/fuse")
}

// newFuseBackendT opens a fuse backend on dir. At cleanup, also when the test failed, it closes the backend
// (which releases the devices on its mount and unmounts), releases devices left on dir's files, and lazily
// unmounts whatever is still mounted under dir; nothing outside dir is touched.
func newFuseBackendT(t testing.TB, dir string, policy fuseblock.Policy) *FuseBackend {
	t.Helper()
	requireFuse(t)
	fuseCleanup(t, dir)
	b, err := NewFuseBackend(context.Background(), dir, FuseOptions{Policy: policy})
	if err != nil {
		t.Fatalf("NewFuseBackend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("cleanup: Close: %v", err)
		}
	})
	return b
}

// fuseCleanup registers the last-resort cleanup of a fuse data directory: devices of its mount first (they
// lose their path once the mount is detached), then devices of its volume files, then mounts.
func fuseCleanup(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, sub := range []string{fuseDir, volumesDir} {
			if err := releaseDevicesIn(ctx, filepath.Join(resolved, sub), nil); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		testutil.UnmountUnder(t, resolved)
	})
}

// directIO reads or writes len(buf) bytes at off of path with O_DIRECT, so the device's own page cache
// neither answers nor holds the request. buf must be page aligned (alignedBuf).
func directIO(path string, off int64, buf []byte, write bool) error {
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if write {
		_, err = f.WriteAt(buf, off)
	} else {
		_, err = f.ReadAt(buf, off)
	}
	return err
}

func sysfsAttr(t *testing.T, dev, attr string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", attr))
	if err != nil {
		t.Fatalf("%s of %s: %v", attr, dev, err)
	}
	return strings.TrimSpace(string(raw))
}

// TestFuseBackendDevice walks a volume through the fuse backend: the device is bound to the FUSE file with
// direct I/O, writes through it land in the volume file, it grows online, a snapshot and its restore carry
// the bytes, and Close leaves no device or mount.
func TestFuseBackendDevice(t *testing.T) {
	const mib = 1 << 20
	ctx := context.Background()
	b := newFuseBackendT(t, t.TempDir(), nil)

	if err := b.CreateVolume(ctx, "vol-a", 64*mib); err != nil {
		t.Fatal(err)
	}
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got, want := sysfsBacking(t, dev), b.DeviceFile("vol-a"); got != want {
		t.Fatalf("backing_file = %q, want the FUSE file %q", got, want)
	}
	if got := sysfsAttr(t, dev, "dio"); got != "1" {
		t.Errorf("device bound without direct I/O (dio = %s)", got)
	}
	if got := deviceSize(t, dev); got != 64*mib {
		t.Fatalf("device size = %d, want %d", got, 64*mib)
	}

	payload := []byte("written through loop, FUSE and fakecloud")
	const off = 5*mib + 123
	writeAt(t, dev, off, payload)
	expectAt(t, b.VolumeFile("vol-a"), off, payload)
	expectAt(t, dev, off, payload)

	if err := b.ResizeVolume(ctx, "vol-a", 96*mib); err != nil {
		t.Fatalf("ResizeVolume: %v", err)
	}
	if got := deviceSize(t, dev); got != 96*mib {
		t.Fatalf("device size after online resize = %d, want %d", got, 96*mib)
	}
	tail := []byte("past the old end")
	writeAt(t, dev, 90*mib, tail)
	expectAt(t, b.VolumeFile("vol-a"), 90*mib, tail)

	if err := b.CreateSnapshot(ctx, "snap-a", "vol-a"); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	writeAt(t, dev, off, []byte("CHANGED"))
	if err := b.RestoreVolume(ctx, "vol-r", "snap-a", 128*mib); err != nil {
		t.Fatalf("RestoreVolume: %v", err)
	}
	devR, err := b.Attach(ctx, "vol-r")
	if err != nil {
		t.Fatalf("Attach restored: %v", err)
	}
	expectAt(t, devR, off, payload)
	expectAt(t, devR, 90*mib, tail)
	if got := deviceSize(t, devR); got != 128*mib {
		t.Fatalf("restored device size = %d, want %d", got, 128*mib)
	}

	if err := b.Detach(ctx, "vol-r", false); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if got := b.DevicePath("vol-r"); got != "" {
		t.Fatalf("DevicePath after Detach = %q", got)
	}
	if err := b.DeleteVolume(ctx, "vol-a"); err != nil { // attached: detached first
		t.Fatalf("DeleteVolume: %v", err)
	}
	if left := devicesUnder(t, b.MountPoint()); len(left) > 0 {
		t.Fatalf("devices left after Detach and DeleteVolume: %v", left)
	}

	// Close releases the devices of attached volumes and unmounts.
	if _, err := b.Attach(ctx, "vol-r"); err != nil {
		t.Fatal(err)
	}
	mnt := b.MountPoint()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if state, err := fuseblock.Inspect(mnt); err != nil || state != fuseblock.Unmounted {
		t.Fatalf("after Close the mount is %v, %v; want unmounted", state, err)
	}
	if left := devicesUnder(t, mnt); len(left) > 0 {
		t.Fatalf("devices left after Close: %v", left)
	}
}

// TestFuseBackendPolicy proves the I/O seam: a policy refusing reads of a byte range of one volume makes
// reads of that range through its loop device fail with EIO, while other ranges and volumes work, and the
// policy sees the writes and the flush an fsync of the device sends.
func TestFuseBackendPolicy(t *testing.T) {
	const (
		mib      = 1 << 20
		badStart = 4 * mib
		badEnd   = badStart + 64<<10
	)
	var mu sync.Mutex
	var seen []fuseblock.IO
	policy := fuseblock.PolicyFunc(func(_ context.Context, io fuseblock.IO) error {
		mu.Lock()
		seen = append(seen, io)
		mu.Unlock()
		if io.Volume == "vol-a" && io.Op == fuseblock.OpRead && io.Off < badEnd && io.Off+io.Len > badStart {
			return syscall.EIO
		}
		return nil
	})
	ctx := context.Background()
	b := newFuseBackendT(t, t.TempDir(), policy)
	devs := map[string]string{}
	for _, id := range []string{"vol-a", "vol-b"} {
		if err := b.CreateVolume(ctx, id, 16*mib); err != nil {
			t.Fatal(err)
		}
		dev, err := b.Attach(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		devs[id] = dev
	}

	for _, tc := range []struct {
		name    string
		volume  string
		off     int64
		wantEIO bool
	}{
		{"refused range", "vol-a", badStart, true},
		{"inside refused range", "vol-a", badStart + 32<<10, true},
		{"before the range", "vol-a", badStart - 4096, false},
		{"after the range", "vol-a", badEnd, false},
		{"same range of another volume", "vol-b", badStart, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := directIO(devs[tc.volume], tc.off, testutil.AlignedBuf(4096), false)
			if tc.wantEIO && !errors.Is(err, syscall.EIO) {
				t.Fatalf("read at %d: err = %v, want EIO", tc.off, err)
			}
			if !tc.wantEIO && err != nil {
				t.Fatalf("read at %d: %v", tc.off, err)
			}
		})
	}

	mu.Lock()
	seen = nil
	mu.Unlock()
	buf := testutil.AlignedBuf(8192)
	copy(buf, "flushed")
	if err := directIO(devs["vol-b"], 2*mib, buf, true); err != nil {
		t.Fatal(err)
	}
	writeAt(t, devs["vol-b"], 0, []byte("x")) // writes and fsyncs the device
	mu.Lock()
	defer mu.Unlock()
	var wrote, synced bool
	for _, io := range seen {
		wrote = wrote || (io.Volume == "vol-b" && io.Op == fuseblock.OpWrite && io.Off <= 2*mib && io.Off+io.Len >= 2*mib+8192)
		synced = synced || (io.Volume == "vol-b" && io.Op == fuseblock.OpFsync)
	}
	if !wrote || !synced {
		t.Fatalf("policy saw write=%v fsync=%v in %v; want both", wrote, synced, seen)
	}
	expectAt(t, b.VolumeFile("vol-b"), 2*mib, []byte("flushed"))
}

const crashHelperEnv = "BLOCKDEV_FUSE_CRASH_HELPER_DIR"

// crashPayload is what the helper writes through its device before it is killed.
var crashPayload = []byte("survives a kill -9 of the FUSE server")

const crashOffset = 3<<20 + 17

// TestFuseCrashHelper is not a test: TestFuseBackendRestartAfterKill runs the test binary with it, as a
// fakecloud that attaches a volume, writes through it and waits to be killed.
func TestFuseCrashHelper(t *testing.T) {
	b, _, ok := helperBackend(t, crashHelperEnv)
	if !ok {
		return
	}
	ctx := context.Background()
	if err := b.CreateVolume(ctx, "vol-a", 16<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, dev, crashOffset, crashPayload)
	fmt.Printf("READY %s\n", dev)
	select {}
}

// TestFuseBackendRestartAfterKill kills the process serving the mount with SIGKILL, as a crash would: the
// mount is left stale and the device fails. The next backend on the directory removes the stale mount and
// releases the dead device, and Reconcile gives the volume a working device with its data.
func TestFuseBackendRestartAfterKill(t *testing.T) {
	requireFuse(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fuseCleanup(t, dir)
	mnt := filepath.Join(dir, fuseDir)

	h, oldDev := startCrashHelper(t, "TestFuseCrashHelper", crashHelperEnv, dir)

	h.kill()
	if state, err := fuseblock.Inspect(mnt); err != nil || state != fuseblock.Stale {
		t.Fatalf("after kill -9 the mount is %v, %v; want stale", state, err)
	}
	if err := directIO(oldDev, 0, testutil.AlignedBuf(4096), false); err == nil {
		t.Fatalf("the dead server's device %s still reads", oldDev)
	}

	ctx := context.Background()
	b := newFuseBackendT(t, dir, nil)
	if state, err := fuseblock.Inspect(mnt); err != nil || state != fuseblock.Live {
		t.Fatalf("after restart the mount is %v, %v; want live", state, err)
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Fatalf("%d mounts on %s after restart, want 1 (no stale mount under the new one)", n, mnt)
	}
	if d, bound, err := hostSysfs().Read(filepath.Base(oldDev)); err != nil || (bound && d.Live() && d.Backing == b.DeviceFile("vol-a")) {
		t.Fatalf("the dead device %s is still live: %+v, %v", oldDev, d, err)
	}

	if err := b.Reconcile(ctx, map[string]string{"vol-a": oldDev}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	dev := b.DevicePath("vol-a")
	if dev != oldDev {
		t.Fatalf("vol-a is on %q after Reconcile, want its old device %s", dev, oldDev)
	}
	expectAt(t, dev, crashOffset, crashPayload)
	if left := devicesUnder(t, mnt); len(left) != 1 {
		t.Fatalf("devices on the mount = %v, want vol-a's only", left)
	}
}

// mountsAt counts the mounts on dir.
func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n
}

// TestFuseBackendLiveMountRefused: a second backend on a directory another one serves must not take it over.
func TestFuseBackendLiveMountRefused(t *testing.T) {
	dir := t.TempDir()
	newFuseBackendT(t, dir, nil)
	b, err := NewFuseBackend(context.Background(), dir, FuseOptions{})
	if err == nil {
		_ = b.Close()
		t.Fatal("a second fuse backend on a served directory started")
	}
	if !strings.Contains(err.Error(), "another fakecloud") {
		t.Fatalf("err = %v, want it to name another fakecloud", err)
	}
}
