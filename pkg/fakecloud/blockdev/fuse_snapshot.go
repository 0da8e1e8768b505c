package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// Snapshots and copies of an attached volume on the fuse backend are point-in-time on any filesystem: the
// device is flushed (within flushBound), then fuseblock fixes the instant by its copy-on-write barrier, and
// the copy runs while the guest keeps writing (see fuseblock's cow.go). A snapshot's instant is fixed by
// CaptureSnapshot, in the CreateSnapshot call before its reply; the session it begins (or the reflink it
// made under the barrier) waits in begun until a worker's CreateSnapshot finishes it, without the volume's
// lock, since state holds the volume's resize, detach and deletion until the copy ends and the server refuses
// size changes meanwhile. A detached volume is captured as in LoopBackend (reflink, or nothing writes it).

// begunCopies are the snapshots whose instant is fixed in this process and whose file is not complete yet.
type begunCopies struct {
	mu sync.Mutex
	m  map[string]*begunCopy
}

type begunCopy struct {
	p   *fuseblock.PointInTime
	tmp *os.File
}

func (c *begunCopies) put(snapshotID string, b *begunCopy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*begunCopy)
	}
	c.m[snapshotID] = b
}

// take removes and returns the snapshot's begun copy, nil when there is none.
func (c *begunCopies) take(snapshotID string) *begunCopy {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[snapshotID]
	delete(c.m, snapshotID)
	return b
}

// abortAll ends every begun copy (at Close: their sessions end with the server).
func (c *begunCopies) abortAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, b := range c.m {
		b.abort()
		delete(c.m, id)
	}
}

func (b *begunCopy) abort() {
	b.p.Abort()
	discardTemp(b.tmp)
}

// CaptureSnapshot fixes the snapshot's instant now: a flush of the device, then the copy-on-write barrier.
func (b *FuseBackend) CaptureSnapshot(ctx context.Context, snapshotID, volumeID string) (Capture, error) {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return "", err
	}
	defer b.locks.lock(volumeID)()
	attached, err := b.flushDevice(ctx, volumeID)
	if err != nil {
		return "", fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	if !attached {
		return b.captureLocked(snapshotID, volumeID, false)
	}
	path := b.store.snapshotFile(snapshotID)
	tmp, err := tempFor(path)
	if err != nil {
		return "", err
	}
	p, err := b.fs.BeginPointInTime(volumeID, tmp)
	if err != nil {
		discardTemp(tmp)
		return "", fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, notFoundIf(volumeID, err))
	}
	if p.Reflinked() {
		// Complete under the barrier: made durable now, so a crash keeps it.
		if _, err := p.Finish(ctx); err != nil {
			discardTemp(tmp)
			return "", err
		}
		if err := commitTemp(tmp, path, b.store.durable); err != nil {
			return "", err
		}
		return CaptureComplete, nil
	}
	b.begun.put(snapshotID, &begunCopy{p: p, tmp: tmp})
	return CaptureSession, nil
}

// CreateSnapshot finishes the snapshot's begun copy; without one (a detached volume, or a capture made before
// a restart, which state does not replay for a session) it copies the volume's file as it is.
func (b *FuseBackend) CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("volume", volumeID)); err != nil {
		return err
	}
	if c := b.begun.take(snapshotID); c != nil {
		if _, err := c.p.Finish(ctx); err != nil {
			discardTemp(c.tmp)
			return fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
		}
		return commitTemp(c.tmp, b.store.snapshotFile(snapshotID), b.store.durable)
	}
	defer b.locks.lock(volumeID)()
	if b.store.snapshotExists(snapshotID) {
		return nil
	}
	attached, err := b.flushDevice(ctx, volumeID)
	if err != nil {
		return fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	if !attached {
		return b.store.createSnapshot(ctx, snapshotID, volumeID)
	}
	if err := b.copyAttached(ctx, b.store.snapshotFile(snapshotID), volumeID, 0); err != nil {
		return fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	return nil
}

// DeleteSnapshot also ends the snapshot's begun copy.
func (b *FuseBackend) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if err := validateID("snapshot", snapshotID); err != nil {
		return err
	}
	if c := b.begun.take(snapshotID); c != nil {
		c.abort()
	}
	return b.LoopBackend.DeleteSnapshot(ctx, snapshotID)
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
	attached, err := b.flushDevice(ctx, sourceVolumeID)
	if err != nil {
		return fmt.Errorf("copy volume %s to %s: %w", sourceVolumeID, volumeID, err)
	}
	if !attached {
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

func notFoundIf(volumeID string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", volumeID, ErrNotFound)
	}
	return err
}

// copyAttached writes a point-in-time copy of the volume to path, grown to growTo when that is larger, through a
// temporary file renamed into place when complete (removed on failure; RemoveTemporaryFiles removes one a
// crash left).
func (b *FuseBackend) copyAttached(ctx context.Context, path, volumeID string, growTo int64) error {
	return writeFileAtomic(path, b.store.durable, func(dst *os.File) error {
		stats, err := b.fs.CopyPointInTime(ctx, volumeID, dst)
		if err != nil {
			return notFoundIf(volumeID, err)
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
