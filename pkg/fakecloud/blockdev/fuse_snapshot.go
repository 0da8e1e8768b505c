package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/klog/v2"
)

// Snapshots and copies of an attached volume on the fuse backend are point-in-time on any filesystem: the
// device is flushed, then fuseblock copies the file by copy-on-write while the guest keeps writing (see
// fuseblock's cow.go). A detached volume is copied as in LoopBackend (reflink or sparse copy): nothing writes
// it. The volume's lock is held for the whole copy, so a ResizeVolume, Detach or DeleteVolume of the volume
// waits for it, and the size the copy recorded stays the volume's.

// CreateSnapshot copies the volume's file as it was at one instant of its device.
func (b *FuseBackend) CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	if !b.flushIfAttached(volumeID) {
		return b.store.createSnapshot(ctx, snapshotID, volumeID)
	}
	if err := b.copyAttached(ctx, b.store.snapshotFile(snapshotID), volumeID, 0); err != nil {
		return fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	return nil
}

// CopyVolume makes the new volume a copy of the source as it was at one instant of its device.
func (b *FuseBackend) CopyVolume(ctx context.Context, volumeID, sourceVolumeID string, sizeBytes int64) error {
	if err := errors.Join(validateID("volume", volumeID), validateID("volume", sourceVolumeID)); err != nil {
		return err
	}
	if volumeID == sourceVolumeID {
		return fmt.Errorf("copy volume %s onto itself", volumeID)
	}
	defer b.locks.lock(sourceVolumeID)()
	defer b.locks.lock(volumeID)()
	if !b.flushIfAttached(sourceVolumeID) {
		return b.store.copyVolume(ctx, volumeID, sourceVolumeID, sizeBytes)
	}
	if err := validSize(sizeBytes); err != nil {
		return err
	}
	if exists, err := b.store.checkExisting(volumeID, sizeBytes); exists || err != nil {
		return err // an existing file of the size is a finished copy being replayed
	}
	// The size cannot change while the lock is held; checked again against the copy's own.
	if cur, err := b.store.volumeSize(sourceVolumeID); err != nil {
		return err
	} else if sizeBytes < cur {
		return fmt.Errorf("copy volume %s to %s: target size %d is smaller than the source's %d bytes",
			sourceVolumeID, volumeID, sizeBytes, cur)
	}
	if err := b.copyAttached(ctx, b.store.volumeFile(volumeID), sourceVolumeID, sizeBytes); err != nil {
		return fmt.Errorf("copy volume %s to %s: %w", sourceVolumeID, volumeID, err)
	}
	return nil
}

// flushIfAttached flushes the volume's device, if it has one, so that what the guest flushed is in the file,
// and says whether it has one.
func (b *FuseBackend) flushIfAttached(volumeID string) bool {
	d, ok, err := hostSysfs().FindByBackingFile(b.bound(volumeID))
	if err != nil || !ok {
		return false
	}
	if err := syncLoop(d); err != nil {
		klog.V(2).InfoS("Flushing device before copy failed, copying anyway", "volume", volumeID,
			"device", d.Path(), "err", err)
	}
	return true
}

// copyAttached writes a point-in-time copy of the volume to path, grown to growTo when that is larger, through a
// temporary file renamed into place when complete (removed on failure; RemoveTemporaryFiles removes one a
// crash left).
func (b *FuseBackend) copyAttached(ctx context.Context, path, volumeID string, growTo int64) error {
	return writeFileAtomic(path, b.store.durable, func(dst *os.File) error {
		stats, err := b.fs.CopyPointInTime(ctx, volumeID, dst)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("volume %s: %w", volumeID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if growTo != 0 && growTo < stats.Size {
			return fmt.Errorf("target size %d is smaller than volume %s of %d bytes", growTo, volumeID, stats.Size)
		}
		if growTo > stats.Size {
			if err := dst.Truncate(growTo); err != nil {
				return fmt.Errorf("grow copy to %d: %w", growTo, err)
			}
		}
		klog.V(2).InfoS("Point-in-time copy of attached volume", "volume", volumeID, "file", path,
			"reflinked", stats.Reflinked, "chunks", stats.Chunks, "writerChunks", stats.WriterChunks)
		return nil
	})
}
