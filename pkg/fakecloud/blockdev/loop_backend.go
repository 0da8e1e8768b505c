package blockdev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// LoopBackend keeps volumes as sparse files like FileBackend and attaches them as real loop devices. It keeps
// no attachment table: the kernel's loop bindings (sysfs backing_file) are the truth, so a restarted process,
// or a CSI node plugin, sees the same attachments.
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
}

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
	b := &LoopBackend{volumeFiles: volumeFiles{store: s}, bound: s.volumeFile, boundID: s.volumeIDOf, flushBound: FlushBound}
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
	return b.attachLocked(ctx, volumeID)
}

func (b *LoopBackend) attachLocked(ctx context.Context, volumeID string) (string, error) {
	if _, err := b.store.volumeSize(volumeID); err != nil {
		return "", err
	}
	file := b.bound(volumeID)
	if d, ok, err := hostSysfs().FindByBackingFile(file); err != nil || ok {
		return d.Path(), err
	}
	dev, err := attachLoop(ctx, file, b.loopFlags)
	if err != nil {
		return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	if b.loopFlags&unix.LO_FLAGS_DIRECT_IO != 0 {
		warnBuffered(volumeID, dev)
	}
	klog.InfoS("Attached volume", "volume", volumeID, "device", dev)
	return dev, nil
}

func (b *LoopBackend) Detach(ctx context.Context, volumeID string, force bool) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	return b.detachLocked(ctx, volumeID, force)
}

// detachLocked releases every live device of the volume (normally one; a second appears only if someone
// else bound the same file).
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
// was deleted under the device), then makes sure every wanted volume has a device. Devices whose backing file
// lies outside <dataDir>/volumes belong to other software and are never touched.
func (b *LoopBackend) Reconcile(ctx context.Context, attached []string) error {
	want := make(map[string]bool, len(attached))
	var errs []error
	for _, id := range attached {
		if err := validateID("volume", id); err != nil {
			errs = append(errs, err)
			continue
		}
		want[id] = true
	}

	devs, err := hostSysfs().List()
	if err != nil {
		return err
	}
	for _, d := range devs {
		id, ours := b.boundID(d.Backing)
		if !ours || d.Autoclear || (want[id] && !d.Deleted) {
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

	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		unlock := b.locks.lock(id)
		_, err := b.attachLocked(ctx, id)
		unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close does nothing: devices stay bound across restarts and Reconcile picks them up again.
func (b *LoopBackend) Close() error { return nil }
