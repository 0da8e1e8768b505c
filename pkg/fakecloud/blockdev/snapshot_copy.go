package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CopySnapshot makes the snapshot's file a copy of a finished snapshot's. A snapshot's file is never written
// once it has its final name (it is made under a temporary name and renamed), so the copy is a second name for
// the same bytes: a hard link, instant on any filesystem, made durable with its directory's sync. Removing
// either snapshot later removes only its name. An existing file is a finished copy being replayed; a missing
// source is ErrNotFound.
func (f *volumeFiles) CopySnapshot(_ context.Context, snapshotID, sourceSnapshotID string) error {
	if err := errors.Join(validateID("snapshot", snapshotID), validateID("snapshot", sourceSnapshotID)); err != nil {
		return err
	}
	if snapshotID == sourceSnapshotID {
		return fmt.Errorf("copy snapshot %s onto itself", snapshotID)
	}
	if f.store.snapshotExists(snapshotID) {
		return nil
	}
	dst := f.store.snapshotFile(snapshotID)
	err := os.Link(f.store.snapshotFile(sourceSnapshotID), dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("snapshot %s: %w", sourceSnapshotID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("copy snapshot %s to %s: %w", sourceSnapshotID, snapshotID, err)
	}
	if f.store.durable {
		if err := syncDir(filepath.Dir(dst)); err != nil {
			_ = os.Remove(dst)
			return fmt.Errorf("copy snapshot %s to %s: %w", sourceSnapshotID, snapshotID, err)
		}
	}
	return nil
}
