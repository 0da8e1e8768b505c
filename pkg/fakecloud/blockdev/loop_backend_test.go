package blockdev

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

func requireLoop(t testing.TB) {
	t.Helper()
	testutil.SkipUnless(t, Available(), "loop backend needs root and /dev/loop-control")
}

// newLoopBackendT opens a loop backend on dir and makes sure every loop device backed by a file in its volumes
// directory is released when the test ends, whichever instance attached it and however the test ended.
func newLoopBackendT(t testing.TB, dir string) (*LoopBackend, string) {
	t.Helper()
	requireLoop(t)
	b, err := NewLoopBackend(dir)
	if err != nil {
		t.Fatalf("NewLoopBackend: %v", err)
	}
	releaseUnderAtCleanup(t, b.store.volumesPath())
	return b, b.store.dataDir
}

// releaseUnderAtCleanup releases, at the end of the test, the loop devices whose backing file sits directly
// in dir. Test directories are unique, so these are only devices the test created.
func releaseUnderAtCleanup(t testing.TB, dir string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		devs, err := hostSysfs().List()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, d := range devs {
			if filepath.Dir(d.Backing) != dir {
				continue
			}
			if _, err := clearLoop(d, true); err != nil {
				t.Errorf("cleanup: release %s: %v", d.Path(), err)
				continue
			}
			if err := waitReleased(ctx, d); err != nil {
				t.Errorf("cleanup: wait for %s: %v", d.Path(), err)
			}
		}
		if left := devicesUnder(t, dir); len(left) > 0 {
			t.Errorf("cleanup: loop devices still bound to files in %s: %v", dir, left)
		}
	})
}

func devicesUnder(t testing.TB, dir string) []string {
	t.Helper()
	devs, err := hostSysfs().List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range devs {
		if filepath.Dir(d.Backing) == dir {
			out = append(out, d.Path()+"="+d.Backing)
		}
	}
	return out
}

// mountExt4 formats dev and mounts it on a fresh directory, unmounting at cleanup.
func mountExt4(t *testing.T, dev string) string {
	t.Helper()
	testutil.RequireTools(t, "mkfs.ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", dev, err, out)
	}
	dir := t.TempDir()
	if err := unix.Mount(dev, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", dev, dir, err)
	}
	t.Cleanup(func() { unmount(t, dir) })
	return dir
}

// unmount is idempotent: EINVAL means nothing is mounted there (any more).
func unmount(t *testing.T, dir string) {
	t.Helper()
	err := unix.Unmount(dir, 0)
	if err == nil || errors.Is(err, unix.EINVAL) {
		return
	}
	if lazyErr := unix.Unmount(dir, unix.MNT_DETACH); lazyErr != nil && !errors.Is(lazyErr, unix.EINVAL) {
		t.Errorf("unmount %s: %v (lazy: %v)", dir, err, lazyErr)
	}
}

func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	out, err := exec.Command("blockdev", "--getsize64", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("blockdev --getsize64 %s: %v\n%s", dev, err, out)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("blockdev output %q: %v", out, err)
	}
	return n
}

func sysfsBacking(t *testing.T, dev string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(loopdev.DefaultRoot, filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		t.Fatalf("backing_file of %s: %v", dev, err)
	}
	return strings.TrimSuffix(string(raw), "\n")
}

// TestLoopBackendDevice walks a volume through a real loop device: attach, write through the device, grow
// online, snapshot, restore into a new volume and read the bytes back through that volume's device.
func TestLoopBackendDevice(t *testing.T) {
	const mib = 1 << 20
	ctx := context.Background()
	b, _ := newLoopBackendT(t, t.TempDir())

	if err := b.CreateVolume(ctx, "vol-a", 64*mib); err != nil {
		t.Fatal(err)
	}
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	st, err := os.Stat(dev)
	if err != nil {
		t.Fatalf("device node: %v", err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		t.Fatalf("%s is not a block device: %v", dev, st.Mode())
	}
	if got, want := sysfsBacking(t, dev), b.VolumeFile("vol-a"); got != want {
		t.Fatalf("backing_file = %q, want %q", got, want)
	}
	if found, err := FindLoopDevice(b.VolumeFile("vol-a")); err != nil || found != dev {
		t.Fatalf("FindLoopDevice = %q, %v; want %q", found, err, dev)
	}
	if got := deviceSize(t, dev); got != 64*mib {
		t.Fatalf("device size = %d, want %d", got, 64*mib)
	}

	payload := []byte("written through the loop device")
	const off = 5*mib + 123
	writeAt(t, dev, off, payload)

	if err := b.ResizeVolume(ctx, "vol-a", 96*mib); err != nil {
		t.Fatalf("ResizeVolume: %v", err)
	}
	if got := deviceSize(t, dev); got != 96*mib {
		t.Fatalf("device size after online resize = %d, want %d", got, 96*mib)
	}

	if err := b.CreateSnapshot(ctx, "snap-a", "vol-a"); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if err := b.RestoreVolume(ctx, "vol-r", "snap-a", 128*mib); err != nil {
		t.Fatalf("RestoreVolume: %v", err)
	}
	devR, err := b.Attach(ctx, "vol-r")
	if err != nil {
		t.Fatalf("Attach restored: %v", err)
	}
	if devR == dev {
		t.Fatalf("restored volume got the same device %s", dev)
	}
	expectAt(t, devR, off, payload)
	if got := deviceSize(t, devR); got != 128*mib {
		t.Fatalf("restored device size = %d, want %d", got, 128*mib)
	}

	for _, id := range []string{"vol-a", "vol-r"} {
		if err := b.Detach(ctx, id, false); err != nil {
			t.Fatalf("Detach(%s): %v", id, err)
		}
	}
	if left := devicesUnder(t, b.store.volumesPath()); len(left) > 0 {
		t.Fatalf("devices left after Detach: %v", left)
	}
}

// TestLoopBackendBusy mounts a filesystem from the device: a plain Detach must refuse, and succeed once the
// filesystem is unmounted.
func TestLoopBackendBusy(t *testing.T) {
	ctx := context.Background()
	b, _ := newLoopBackendT(t, t.TempDir())
	if err := b.CreateVolume(ctx, "vol-a", 64<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountExt4(t, dev)

	if err := b.Detach(ctx, "vol-a", false); !errors.Is(err, ErrBusy) {
		t.Fatalf("Detach while mounted: err = %v, want ErrBusy", err)
	}
	if got := b.DevicePath("vol-a"); got != dev {
		t.Fatalf("DevicePath after refused Detach = %q, want %q", got, dev)
	}

	unmount(t, mnt)
	if err := b.Detach(ctx, "vol-a", false); err != nil {
		t.Fatalf("Detach after unmount: %v", err)
	}
	if got := b.DevicePath("vol-a"); got != "" {
		t.Fatalf("DevicePath after Detach = %q", got)
	}
}

// TestLoopBackendForceDetachHeld: a forced detach of a mounted device returns at once, the filesystem keeps
// working, and the kernel releases the device when it is unmounted.
func TestLoopBackendForceDetachHeld(t *testing.T) {
	ctx := context.Background()
	b, _ := newLoopBackendT(t, t.TempDir())
	if err := b.CreateVolume(ctx, "vol-a", 64<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountExt4(t, dev)

	if err := b.Detach(ctx, "vol-a", true); err != nil {
		t.Fatalf("forced Detach while mounted: %v", err)
	}
	if got := b.DevicePath("vol-a"); got != "" {
		t.Fatalf("DevicePath after forced Detach = %q, want none (release pending)", got)
	}
	if err := os.WriteFile(filepath.Join(mnt, "still-works"), []byte("x"), 0o600); err != nil {
		t.Fatalf("filesystem unusable after forced detach: %v", err)
	}
	if left := devicesUnder(t, b.store.volumesPath()); len(left) != 1 {
		t.Fatalf("devices during pending release = %v, want the held one", left)
	}

	unmount(t, mnt)
	deadline := time.Now().Add(5 * time.Second)
	for len(devicesUnder(t, b.store.volumesPath())) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("device %s still bound after unmount", dev)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLoopBackendReconcile simulates a restart: a new instance on the same directory keeps the device of a
// listed volume, attaches a listed volume that has none, releases devices of unlisted or deleted volumes, and
// leaves devices backed by files outside its directory alone.
func TestLoopBackendReconcile(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	b1, _ := newLoopBackendT(t, filepath.Join(base, "data"))
	for _, id := range []string{"vol-keep", "vol-drop", "vol-new", "vol-gone"} {
		if err := b1.CreateVolume(ctx, id, 8<<20); err != nil {
			t.Fatal(err)
		}
	}
	attached := map[string]string{}
	for _, id := range []string{"vol-keep", "vol-drop", "vol-gone"} {
		dev, err := b1.Attach(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		attached[id] = dev
	}
	// A crash after unlinking a file but before detaching leaves a device on a "(deleted)" backing file.
	if err := os.Remove(b1.VolumeFile("vol-gone")); err != nil {
		t.Fatal(err)
	}

	// Devices of other software: one far away, one in a sibling directory whose path shares the prefix.
	foreign := map[string]string{}
	for _, dir := range []string{filepath.Join(base, "elsewhere"), filepath.Join(base, "data-sibling", "volumes")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "vol-drop.img")
		if err := os.WriteFile(file, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		releaseUnderAtCleanup(t, dir)
		dev, err := attachLoop(ctx, file, 0, -1, nil)
		if err != nil {
			t.Fatal(err)
		}
		foreign[file] = dev
	}

	b2, _ := newLoopBackendT(t, filepath.Join(base, "data"))
	err := b2.Reconcile(ctx, map[string]string{"vol-keep": "", "vol-new": "", "vol-missing": ""})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Reconcile with a volume that has no file: err = %v, want ErrNotFound", err)
	}
	if got := b2.DevicePath("vol-keep"); got != attached["vol-keep"] {
		t.Errorf("vol-keep device = %q, want the existing %q", got, attached["vol-keep"])
	}
	if got := b2.DevicePath("vol-new"); got == "" {
		t.Error("vol-new was not attached")
	}
	if got := b2.DevicePath("vol-drop"); got != "" {
		t.Errorf("vol-drop still attached at %s", got)
	}
	for _, left := range devicesUnder(t, b2.store.volumesPath()) {
		if strings.Contains(left, "vol-gone") || strings.Contains(left, "vol-drop") {
			t.Errorf("device not released: %s", left)
		}
	}
	for file, dev := range foreign {
		if got, err := FindLoopDevice(file); err != nil || got != dev {
			t.Errorf("foreign device for %s = %q, %v; want %q untouched", file, got, err, dev)
		}
	}

	// Reconciling again changes nothing.
	before := devicesUnder(t, b2.store.volumesPath())
	if err := b2.Reconcile(ctx, map[string]string{"vol-keep": "", "vol-new": ""}); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if after := devicesUnder(t, b2.store.volumesPath()); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("second Reconcile changed devices: %v -> %v", before, after)
	}
}

// TestBindLoopBusy loses the LOOP_CTL_GET_FREE race on purpose: the device offered as free is bound by
// "another process" first, and bindLoop must report EBUSY so attachLoop retries with the next free device.
func TestBindLoopBusy(t *testing.T) {
	requireLoop(t)
	ctx := context.Background()
	dir := t.TempDir()
	releaseUnderAtCleanup(t, dir)
	files := make([]*os.File, 2)
	for i := range files {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)+".img"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(1 << 20); err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ctl)
	n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bindLoop(n, int(files[0].Fd()), files[0].Name(), 0); err != nil {
		t.Fatalf("first bind of loop%d: %v", n, err)
	}
	if _, err := bindLoop(n, int(files[1].Fd()), files[1].Name(), 0); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("second bind of loop%d: err = %v, want EBUSY", n, err)
	}
	// attachLoop itself gets past the taken device.
	dev, err := attachLoop(ctx, files[1].Name(), 0, -1, nil)
	if err != nil {
		t.Fatalf("attachLoop: %v", err)
	}
	if dev == "/dev/loop"+strconv.Itoa(n) {
		t.Fatalf("attachLoop reused the busy device %s", dev)
	}
}

// TestLoopBackendKeepsNumbers: Reconcile binds a volume whose device is gone on the number recorded for it; a
// volume whose number another device holds is bound elsewhere, and its number is never given to another volume
// while it stays attached.
func TestLoopBackendKeepsNumbers(t *testing.T) {
	ctx := context.Background()
	b1, _ := newLoopBackendT(t, t.TempDir())
	for _, id := range []string{"vol-x", "vol-y", "vol-z"} {
		if err := b1.CreateVolume(ctx, id, 8<<20); err != nil {
			t.Fatal(err)
		}
	}
	// Another program's device holds the number recorded for vol-y.
	foreignDir := t.TempDir()
	releaseUnderAtCleanup(t, foreignDir)
	foreignFile := filepath.Join(foreignDir, "other.img")
	if err := os.WriteFile(foreignFile, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	taken, err := attachLoop(ctx, foreignFile, 0, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	takenN, _ := loopdev.NumberOf(taken)

	old, err := b1.Attach(ctx, "vol-x")
	if err != nil {
		t.Fatal(err)
	}
	// The device is lost behind the backend's back (the fuse backend releases its devices at a restart).
	releaseFile(t, b1.VolumeFile("vol-x"))

	b2, _ := newLoopBackendT(t, b1.store.dataDir)
	if err := b2.Reconcile(ctx, map[string]string{"vol-x": old, "vol-y": taken}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := b2.DevicePath("vol-x"); got != old {
		t.Errorf("vol-x is on %q, want its recorded %s", got, old)
	}
	if got := b2.DevicePath("vol-y"); got == "" || got == taken {
		t.Errorf("vol-y is on %q, want a device other than the taken %s", got, taken)
	}

	// The other program lets go; the number still belongs to vol-y.
	releaseFile(t, foreignFile)
	if got, err := b2.Attach(ctx, "vol-z"); err != nil || got == taken {
		t.Errorf("vol-z attached on %q, %v; %s is vol-y's until it detaches", got, err, taken)
	}
	if err := b2.Detach(ctx, "vol-y", false); err != nil {
		t.Fatal(err)
	}
	if b2.reservedToOthers("vol-z")(takenN) {
		t.Errorf("loop%d still reserved after vol-y detached", takenN)
	}
}

// releaseFile releases the live loop device of file, behind any backend's back.
func releaseFile(t *testing.T, file string) {
	t.Helper()
	d, ok, err := hostSysfs().FindByBackingFile(file)
	if err != nil || !ok {
		t.Fatalf("device of %s: %v, %v", file, ok, err)
	}
	if _, err := clearLoop(d, false); err != nil {
		t.Fatal(err)
	}
	if err := waitReleased(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}
