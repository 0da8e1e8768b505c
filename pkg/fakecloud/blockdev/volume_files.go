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
	// flush writes an attached volume's cached blocks to its file before the file is copied (loop backend).
	flush func(volumeID string)
}

// CreateSnapshot copies the volume's file, flushed first, under the volume's lock.
func (f *volumeFiles) CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return err
	}
	defer f.locks.lock(volumeID)()
	f.flushAttached(volumeID)
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
	f.flushAttached(sourceVolumeID)
	return f.store.copyVolume(ctx, volumeID, sourceVolumeID, sizeBytes)
}

func (f *volumeFiles) flushAttached(volumeID string) {
	if f.flush != nil {
		f.flush(volumeID)
	}
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
