package blockdev

import (
	"context"
	"errors"
	"fmt"
)

// volumeFiles is what both backends do alike: the files of volumes and snapshots, one lock per volume.
type volumeFiles struct {
	store fileStore
	locks keyedMutex
	// flush writes an attached volume's cached blocks to its file before the file is copied, and says whether
	// the volume has a device (loop backend).
	flush func(ctx context.Context, volumeID string) (attached bool, err error)
}

// CaptureSnapshot reflinks the volume's file, flushed first, into the snapshot's where the filesystem can;
// elsewhere the copy is left to CreateSnapshot.
func (f *volumeFiles) CaptureSnapshot(ctx context.Context, snapshotID, volumeID string) (Capture, error) {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return "", err
	}
	defer f.locks.lock(volumeID)()
	attached, err := f.flushAttached(ctx, volumeID)
	if err != nil {
		return "", err
	}
	return f.captureLocked(snapshotID, volumeID, attached)
}

// captureLocked is CaptureSnapshot after the flush, under the volume's lock.
func (f *volumeFiles) captureLocked(snapshotID, volumeID string, attached bool) (Capture, error) {
	cloned, err := f.store.reflinkSnapshot(snapshotID, volumeID)
	switch {
	case err != nil:
		return "", err
	case cloned:
		return CaptureComplete, nil
	case attached:
		return CaptureLive, nil
	}
	return CaptureFrozen, nil
}

// CreateSnapshot copies the volume's file, flushed first, under the volume's lock, unless its capture made it.
func (f *volumeFiles) CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return err
	}
	defer f.locks.lock(volumeID)()
	if f.store.snapshotExists(snapshotID) {
		return nil
	}
	if _, err := f.flushAttached(ctx, volumeID); err != nil {
		return err
	}
	return f.store.createSnapshot(ctx, snapshotID, volumeID)
}

// CopyVolume copies the source's file, flushed first, under the source's lock and the new volume's.
func (f *volumeFiles) CopyVolume(ctx context.Context, volumeID, sourceVolumeID string, sizeBytes int64) error {
	if err := errors.Join(validateID("volume", volumeID), validateID("volume", sourceVolumeID)); err != nil {
		return err
	}
	if volumeID == sourceVolumeID {
		return fmt.Errorf("copy volume %s onto itself", volumeID)
	}
	defer f.locks.lock(sourceVolumeID)()
	defer f.locks.lock(volumeID)()
	if _, err := f.flushAttached(ctx, sourceVolumeID); err != nil {
		return err
	}
	return f.store.copyVolume(ctx, volumeID, sourceVolumeID, sizeBytes)
}

func (f *volumeFiles) flushAttached(ctx context.Context, volumeID string) (bool, error) {
	if f.flush == nil {
		return false, nil
	}
	return f.flush(ctx, volumeID)
}

func (f *volumeFiles) CreateVolume(_ context.Context, volumeID string, sizeBytes int64) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer f.locks.lock(volumeID)()
	return f.store.createVolume(volumeID, sizeBytes)
}

func (f *volumeFiles) RestoreVolume(ctx context.Context, volumeID, snapshotID string, sizeBytes int64) error {
	if err := errors.Join(validateID("volume", volumeID), validateID("snapshot", snapshotID)); err != nil {
		return err
	}
	defer f.locks.lock(volumeID)()
	return f.store.restoreVolume(ctx, volumeID, snapshotID, sizeBytes)
}

func (f *volumeFiles) DeleteSnapshot(_ context.Context, snapshotID string) error {
	if err := validateID("snapshot", snapshotID); err != nil {
		return err
	}
	return f.store.removeSnapshot(snapshotID)
}

// VolumeFile is the path of the volume's backing file; loop devices name it as their backing_file.
func (f *volumeFiles) VolumeFile(volumeID string) string { return f.store.volumeFile(volumeID) }

// VolumeIDs lists the volumes that have a backing file. Temporary files of copies in flight are not listed.
func (f *volumeFiles) VolumeIDs() ([]string, error) { return f.store.ids(volumesDir) }

// SnapshotIDs lists the snapshots that have a file.
func (f *volumeFiles) SnapshotIDs() ([]string, error) { return f.store.ids(snapshotsDir) }

// RemoveTemporaryFiles removes the temporary files of copies a crash cut short.
func (f *volumeFiles) RemoveTemporaryFiles() error { return f.store.removeTemporary() }
