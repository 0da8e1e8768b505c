package blockdev

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// LoopBackend keeps volumes as sparse files like FileBackend and attaches them as real loop devices. It keeps
// no attachment table: the kernel's loop bindings (sysfs backing_file) are the truth, so a restarted process,
// or a CSI node plugin, sees the same attachments.
//
// A volume keeps its loop number. Consumers find a volume by its device path and reopen that path after
// errors (a database on a raw block volume, the kubelet), so a path must never lead to another volume's
// bytes:
//   - Reconcile binds a volume whose device is gone (the fuse backend's after a crash) on the number state
//     recorded for it, waiting up to rebindWait for a stale device on that number to be let go;
//   - a number recorded or bound for a volume is reserved to it until it is detached, and no other volume is
//     bound on a reserved number; a volume that cannot get its number back is bound on a new one, and its old
//     number stays reserved.
type LoopBackend struct {
	volumeFiles
	// bound is the file a volume's loop device is bound to and boundID its inverse (false for files that are
	// not ours): the volume file itself here, its FUSE view in FuseBackend.
	bound   func(volumeID string) string
	boundID func(path string) (volumeID string, ok bool)
	// loopFlags are the LO_FLAGS_* devices are bound with.
	loopFlags uint32
	// beforeCapacity runs between growing the file and the device's re-reading its size (FuseBackend: the
	// kernel's idea of the FUSE file's size must catch up first).
	beforeCapacity func(volumeID string, sizeBytes int64) error
	// flushBound is FlushBound; tests shorten it.
	flushBound time.Duration

	mu sync.Mutex
	// reserved maps loop numbers to the volume they were recorded or bound for; see the type's comment.
	reserved map[int]string
}

// rebindWait bounds how long Reconcile waits for the stale devices on recorded numbers to be released: a
// deferred clear completes when the last holder (a writer that met the dead server) closes the device.
const rebindWait = 5 * time.Second

var _ Backend = (*LoopBackend)(nil)

// NewLoopBackend uses the same file layout as NewFileBackend. It fails when Available does.
func NewLoopBackend(dataDir string, opts ...Option) (*LoopBackend, error) {
	if err := Available(); err != nil {
		return nil, fmt.Errorf("blockdev: loop backend unavailable: %w", err)
	}
	s, err := newFileStore(dataDir, opts...)
	if err != nil {
		return nil, err
	}
	b := &LoopBackend{volumeFiles: volumeFiles{store: s}, bound: s.volumeFile, boundID: s.volumeIDOf, flushBound: FlushBound,
		reserved: map[int]string{}}
	b.flush = b.flushDevice
	return b, nil
}

// flushDevice writes the cached blocks of the volume's device, if one is bound, to its file, and says whether
// one is. A copy goes on when the flush fails (it is as consistent as a crash, the promise EBS makes), but not
// when it hangs past flushBound: the caller gets ErrFlushTimeout and releases the volume's lock.
func (b *LoopBackend) flushDevice(ctx context.Context, volumeID string) (bool, error) {
	d, ok, err := hostSysfs().FindByBackingFile(b.bound(volumeID))
	if err != nil || !ok {
		return false, nil
	}
	if err := syncLoopBounded(ctx, d, b.flushBound); err != nil {
		if errors.Is(err, ErrFlushTimeout) || ctx.Err() != nil {
			klog.InfoS("Flushing device before copy timed out", "volume", volumeID, "device", d.Path(), "err", err)
			return true, err
		}
		klog.V(2).InfoS("Flushing device before copy failed, copying anyway", "volume", volumeID,
			"device", d.Path(), "err", err)
	}
	return true, nil
}

// DeleteVolume force-detaches first: a device still held keeps the unlinked inode until its holder lets go.
func (b *LoopBackend) DeleteVolume(ctx context.Context, volumeID string) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	if err := b.detachLocked(ctx, volumeID, true); err != nil {
		return fmt.Errorf("delete volume %s: %w", volumeID, err)
	}
	return b.store.removeVolume(volumeID)
}

func (b *LoopBackend) ResizeVolume(_ context.Context, volumeID string, sizeBytes int64) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	if err := b.store.growVolume(volumeID, sizeBytes); err != nil {
		return err
	}
	// Refresh even when the file already had the size: a crash between truncate and refresh is repaired by
	// the state layer replaying the resize.
	d, ok, err := hostSysfs().FindByBackingFile(b.bound(volumeID))
	if err != nil || !ok {
		return err
	}
	if b.beforeCapacity != nil {
		if err := b.beforeCapacity(volumeID, sizeBytes); err != nil {
			return fmt.Errorf("resize volume %s: %w", volumeID, err)
		}
	}
	if err := setLoopCapacity(d); err != nil {
		return fmt.Errorf("resize volume %s: %w", volumeID, err)
	}
	return nil
}

func (b *LoopBackend) Attach(ctx context.Context, volumeID string) (string, error) {
	if err := validateID("volume", volumeID); err != nil {
		return "", err
	}
	defer b.locks.lock(volumeID)()
	return b.attachLocked(ctx, volumeID, -1, time.Time{})
}

// attachLocked returns the volume's live device or binds one: on number recorded when it is not negative (and
// the stale device there, if any, is let go before deadline), otherwise on a number not reserved to another
// volume.
func (b *LoopBackend) attachLocked(ctx context.Context, volumeID string, recorded int, deadline time.Time) (string, error) {
	if _, err := b.store.volumeSize(volumeID); err != nil {
		return "", err
	}
	file := b.bound(volumeID)
	if d, ok, err := hostSysfs().FindByBackingFile(file); err != nil || ok {
		if ok {
			b.reserve(volumeID, d.Number)
		}
		return d.Path(), err
	}
	var dev string
	err := errors.New("no number recorded")
	if recorded >= 0 {
		dev, err = b.rebind(ctx, file, recorded, deadline)
		if err != nil {
			klog.InfoS("Warning: volume cannot get its loop device back, binding another; its old device stays unused",
				"volume", volumeID, "number", recorded, "err", err)
		}
	}
	if err != nil {
		dev, err = attachLoop(ctx, file, b.loopFlags, -1, b.reservedToOthers(volumeID))
	}
	if err != nil {
		return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	if n, ok := loopdev.NumberOf(dev); ok {
		b.reserve(volumeID, n)
	}
	if b.loopFlags&unix.LO_FLAGS_DIRECT_IO != 0 {
		warnBuffered(volumeID, dev)
	}
	klog.InfoS("Attached volume", "volume", volumeID, "device", dev)
	return dev, nil
}

// rebind binds file on loop number n, waiting until deadline while n is a device on its way out (a forced
// clear deferred until its holder closes). A device bound for good is someone else's and fails at once.
func (b *LoopBackend) rebind(ctx context.Context, file string, n int, deadline time.Time) (string, error) {
	for {
		dev, err := attachLoop(ctx, file, b.loopFlags, n, nil)
		if !errors.Is(err, unix.EBUSY) {
			return dev, err
		}
		d, bound, rerr := hostSysfs().Read("loop" + strconv.Itoa(n))
		if rerr != nil || bound && !d.Autoclear || time.Now().After(deadline) {
			return "", errors.Join(err, rerr)
		}
		if err := ctxsleep.Sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
}

func (b *LoopBackend) reserve(volumeID string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved[n] = volumeID
}

// unreserve frees the numbers of a detached volume.
func (b *LoopBackend) unreserve(volumeID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.reserved, func(_ int, id string) bool { return id == volumeID })
}

// reservedToOthers refuses the numbers reserved to volumes other than volumeID.
func (b *LoopBackend) reservedToOthers(volumeID string) func(n int) bool {
	return func(n int) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		id, ok := b.reserved[n]
		return ok && id != volumeID
	}
}

func (b *LoopBackend) Detach(ctx context.Context, volumeID string, force bool) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	return b.detachLocked(ctx, volumeID, force)
}

// detachLocked releases every live device of the volume (normally one; a second appears only if someone
// else bound the same file) and then its numbers.
func (b *LoopBackend) detachLocked(ctx context.Context, volumeID string, force bool) error {
	devs, err := hostSysfs().List()
	if err != nil {
		return err
	}
	file := b.bound(volumeID)
	for _, d := range devs {
		if !d.Live() || d.Backing != file {
			continue
		}
		if err := releaseLoop(ctx, volumeID, d, force); err != nil {
			return fmt.Errorf("detach volume %s: %w", volumeID, err)
		}
	}
	b.unreserve(volumeID)
	return nil
}

// release clears one device and, unless a holder defers the clear, waits until the kernel has let go.
// releaseLoop clears the volume's device d; a held one (force) is released by the kernel once its holder lets go.
func releaseLoop(ctx context.Context, volumeID string, d loopdev.Device, force bool) error {
	held, err := clearLoop(d, force)
	if err != nil {
		return err
	}
	if held {
		klog.InfoS("Detach deferred until the device is released", "volume", volumeID, "device", d.Path())
		return nil
	}
	klog.InfoS("Detached volume", "volume", volumeID, "device", d.Path())
	return waitReleased(ctx, d)
}

func (b *LoopBackend) DevicePath(volumeID string) string {
	if validateID("volume", volumeID) != nil {
		return ""
	}
	dev, err := FindLoopDevice(b.bound(volumeID))
	if err != nil {
		klog.ErrorS(err, "Listing loop devices", "volume", volumeID)
		return ""
	}
	return dev
}

// Reconcile releases this backend's devices that state no longer wants (unknown volume, or a volume file that
// was deleted under the device), then makes sure every wanted volume has a device, on the number it had when
// one was recorded (see the type's comment). Devices whose backing file lies outside <dataDir>/volumes belong
// to other software and are never touched.
func (b *LoopBackend) Reconcile(ctx context.Context, attached map[string]string) error {
	want := make(map[string]int, len(attached))
	var errs []error
	for id, dev := range attached {
		if err := validateID("volume", id); err != nil {
			errs = append(errs, err)
			continue
		}
		n, ok := loopdev.NumberOf(dev)
		if !ok {
			n = -1
		} else {
			// Reserved before any volume is bound, so that none lands on another's number.
			b.reserve(id, n)
		}
		want[id] = n
	}

	devs, err := hostSysfs().List()
	if err != nil {
		return err
	}
	for _, d := range devs {
		id, ours := b.boundID(d.Backing)
		if _, wanted := want[id]; !ours || d.Autoclear || (wanted && !d.Deleted) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		unlock := b.locks.lock(id)
		err := releaseLoop(ctx, id, d, true)
		unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: release %s of volume %s: %w", d.Path(), id, err))
		}
	}

	deadline := time.Now().Add(rebindWait)
	for _, id := range slices.Sorted(maps.Keys(want)) {
		unlock := b.locks.lock(id)
		_, err := b.attachLocked(ctx, id, want[id], deadline)
		unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close does nothing: devices stay bound across restarts and Reconcile picks them up again.
func (b *LoopBackend) Close() error { return nil }
