// Package blockdev stores fakecloud's volumes and snapshots as sparse files under a data directory and, in the
// loop and fuse backends, exposes attached volumes as real Linux loop devices (in the fuse backend bound to the
// files as fakecloud's own FUSE filesystem serves them). The state package decides what happens; this package
// only does it to files and devices.
package blockdev

import (
	"context"
	"errors"
	"time"
)

// ErrBusy means a device is still held (mounted, opened exclusively) and a non-forced detach must wait.
var ErrBusy = errors.New("device is busy")

// ErrNotFound means the volume or snapshot has no backing file.
var ErrNotFound = errors.New("backing file not found")

// ErrFlushTimeout means an attached volume's device did not finish flushing within FlushBound: a hung device
// (or an injected hang) cannot pin a snapshot, or the volume's lock, for ever.
var ErrFlushTimeout = errors.New("device flush timed out")

// FlushBound bounds the flush of an attached volume's device before its point in time is taken.
const FlushBound = 10 * time.Second

// Capture says how CaptureSnapshot fixed a snapshot's point in time, and so what a restart may do with a
// snapshot whose copy had not finished.
type Capture string

const (
	// CaptureComplete: the snapshot's file is made (a reflink); nothing is left to copy, and it survives a crash.
	CaptureComplete Capture = "complete"
	// CaptureFrozen: the volume has no device, and its file does not change until the copy ends (state keeps
	// it from being attached or grown meanwhile); a copy run after a crash reads the same bytes.
	CaptureFrozen Capture = "frozen"
	// CaptureSession: a copy-on-write session in this process keeps the point-in-time bytes (fuse backend);
	// it ends with the process, so after a crash the point in time is lost.
	CaptureSession Capture = "session"
	// CaptureLive: no instant copy exists (an attached loop device over a filesystem without reflink); the
	// copy holds the volume as it is when the copy runs.
	CaptureLive Capture = "live"
)

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
	// CaptureSnapshot fixes the snapshot's point in time now, before its request is answered: an attached
	// device is flushed first (within FlushBound, else ErrFlushTimeout), then the file is reflinked or, on the
	// fuse backend, a copy-on-write session begun. It says how (Capture); CreateSnapshot copies the rest. A
	// missing volume is ErrNotFound.
	CaptureSnapshot(ctx context.Context, snapshotID, volumeID string) (Capture, error)
	// CreateSnapshot completes the snapshot's file from its capture, or, with none in this process (Frozen,
	// Live, or a restart), copies the volume's bytes now (reflink where possible, sparse copy otherwise); an
	// attached device is flushed first. An existing snapshot file is a finished snapshot. A missing volume is
	// ErrNotFound.
	CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error
	// CopySnapshot makes the snapshot's file a copy of a finished snapshot's (CopySnapshot within the region).
	// An existing file is a finished copy; a missing source is ErrNotFound.
	CopySnapshot(ctx context.Context, snapshotID, sourceSnapshotID string) error
	// CaptureSnapshots fixes the points in time of several volumes' snapshots (snapshot ID → volume ID) at one
	// instant, as CaptureSnapshot does for one: crash-consistent across the volumes. On failure nothing of the
	// captures is kept.
	CaptureSnapshots(ctx context.Context, snapshots map[string]string) (map[string]Capture, error)
	// DeleteSnapshot ends the snapshot's capture, if any, and removes its file. Missing is not an error.
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
