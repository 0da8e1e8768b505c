// Package blockdev stores fakecloud's volumes and snapshots as sparse files under a data directory and, in the
// loop and fuse backends, exposes attached volumes as real Linux loop devices (in the fuse backend bound to the
// files as fakecloud's own FUSE filesystem serves them). The state package decides what happens; this package
// only does it to files and devices.
package blockdev

import (
	"context"
	"errors"
)

// ErrBusy means a device is still held (mounted, opened exclusively) and a non-forced detach must wait.
var ErrBusy = errors.New("device is busy")

// ErrNotFound means the volume or snapshot has no backing file.
var ErrNotFound = errors.New("backing file not found")

// Backend is what fakecloud's state needs from storage. Implementations are safe for concurrent use.
// All sizes are in bytes.
type Backend interface {
	// CreateVolume makes a sparse file of sizeBytes for the volume. Creating an existing volume with the same
	// size succeeds (state replays creations after a restart); with another size it fails with an error
	// matching fs.ErrExist.
	CreateVolume(ctx context.Context, volumeID string, sizeBytes int64) error
	// RestoreVolume makes the volume's file a copy of the snapshot's bytes, grown to sizeBytes (which must not
	// be smaller than the snapshot). The file appears only once the copy is complete, so an existing volume of
	// sizeBytes is a finished restore and succeeds; a missing snapshot is ErrNotFound.
	RestoreVolume(ctx context.Context, volumeID, snapshotID string, sizeBytes int64) error
	// CopyVolume makes the volume's file a point-in-time copy of the source volume's bytes, grown to sizeBytes
	// (which must not be smaller than the source); an attached source device is flushed first. As with a
	// restore, the file appears only once the copy is complete. A missing source is ErrNotFound.
	CopyVolume(ctx context.Context, volumeID, sourceVolumeID string, sizeBytes int64) error
	// DeleteVolume removes the volume's file, detaching its device first if one remains. Missing is not an error.
	DeleteVolume(ctx context.Context, volumeID string) error
	// ResizeVolume grows the file to sizeBytes and refreshes the capacity of an attached device, so the kernel
	// sees the new size while attached. The current size is a no-op; shrinking is an error.
	ResizeVolume(ctx context.Context, volumeID string, sizeBytes int64) error
	// Attach exposes the volume as a device and returns its path (/dev/loopN, or the file itself in the file
	// backend). Attaching an already attached volume returns the existing device; a volume without a file is
	// ErrNotFound.
	Attach(ctx context.Context, volumeID string) (devicePath string, err error)
	// Detach releases the volume's device. A device still held returns ErrBusy unless force is set; a forced
	// detach of a held device is completed by the kernel once the holder lets go. Not attached is not an error.
	Detach(ctx context.Context, volumeID string, force bool) error
	// DevicePath returns the device of an attached volume, or "" when none is bound. A device whose forced
	// detach is still waiting for its holder no longer counts.
	DevicePath(volumeID string) string
	// CreateSnapshot makes a point-in-time copy of the volume's bytes (reflink where possible, sparse copy
	// otherwise); an attached device is flushed first. A missing volume is ErrNotFound.
	CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error
	// DeleteSnapshot removes the snapshot's file. Missing is not an error.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// Reconcile runs after a restart: every volume in attached gets a device again (found by its backing file or
	// bound again, on the device attached maps it to, the one it had, where the backend can); devices backed by
	// files of this backend whose volume is not in attached are released.
	Reconcile(ctx context.Context, attached map[string]string) error
	// VolumeIDs and SnapshotIDs list the volumes and snapshots that have a finished file, so that state can
	// remove files it holds no record of.
	VolumeIDs() ([]string, error)
	SnapshotIDs() ([]string, error)
	// RemoveTemporaryFiles removes the temporary files of copies a crash cut short. Call it only when no copy is
	// in flight: at start.
	RemoveTemporaryFiles() error
	// VolumeFile is the path of the volume's backing file; the loop backend's devices name it as their
	// backing_file (the fuse backend's name its FUSE view, FuseBackend.DeviceFile).
	VolumeFile(volumeID string) string
	// Close releases nothing on disk; it only stops background work. Devices stay bound across restarts.
	Close() error
}
