package blockdev

import (
	"context"
	"errors"
)

// volumeFiles is what both backends do alike: the files of volumes and snapshots, one lock per volume.
type volumeFiles struct {
	store fileStore
	locks keyedMutex
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
