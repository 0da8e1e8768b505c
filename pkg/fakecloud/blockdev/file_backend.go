package blockdev

import (
	"context"
	"errors"
	"sync"
)

// FileBackend keeps volumes as plain sparse files and "attaches" a volume by handing out the file path. It
// needs no privileges, so the state and API layers can be tested anywhere. It never reports ErrBusy.
type FileBackend struct {
	volumeFiles

	mu       sync.Mutex
	attached map[string]bool // volume IDs handed out by Attach; forgotten on restart until Reconcile
}

var _ Backend = (*FileBackend)(nil)

// NewFileBackend stores volumes in <dataDir>/volumes/<id>.img and snapshots in <dataDir>/snapshots/<id>.img,
// creating the directories as needed.
func NewFileBackend(dataDir string, opts ...Option) (*FileBackend, error) {
	s, err := newFileStore(dataDir, opts...)
	if err != nil {
		return nil, err
	}
	return &FileBackend{volumeFiles: volumeFiles{store: s}, attached: make(map[string]bool)}, nil
}

func (b *FileBackend) DeleteVolume(_ context.Context, volumeID string) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	b.setAttached(volumeID, false)
	return b.store.removeVolume(volumeID)
}

func (b *FileBackend) ResizeVolume(_ context.Context, volumeID string, sizeBytes int64) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	return b.store.growVolume(volumeID, sizeBytes)
}

// Attach returns the volume file itself as the device.
func (b *FileBackend) Attach(_ context.Context, volumeID string) (string, error) {
	if err := validateID("volume", volumeID); err != nil {
		return "", err
	}
	defer b.locks.lock(volumeID)()
	if _, err := b.store.volumeSize(volumeID); err != nil {
		return "", err
	}
	b.setAttached(volumeID, true)
	return b.store.volumeFile(volumeID), nil
}

// Detach forgets the attachment; force makes no difference because nothing can hold a plain file busy.
func (b *FileBackend) Detach(_ context.Context, volumeID string, _ bool) error {
	if err := validateID("volume", volumeID); err != nil {
		return err
	}
	defer b.locks.lock(volumeID)()
	b.setAttached(volumeID, false)
	return nil
}

func (b *FileBackend) DevicePath(volumeID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.attached[volumeID] {
		return ""
	}
	return b.store.volumeFile(volumeID)
}

// Reconcile replaces the in-memory attachment set with attached. Volumes without a file are reported and left
// detached; the others are attached regardless.
func (b *FileBackend) Reconcile(_ context.Context, attached map[string]string) error {
	want := make(map[string]bool, len(attached))
	var errs []error
	for id := range attached {
		if err := validateID("volume", id); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := b.store.volumeSize(id); err != nil {
			errs = append(errs, err)
			continue
		}
		want[id] = true
	}
	b.mu.Lock()
	b.attached = want
	b.mu.Unlock()
	return errors.Join(errs...)
}

func (b *FileBackend) Close() error { return nil }

func (b *FileBackend) setAttached(volumeID string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.attached[volumeID] = true
	} else {
		delete(b.attached, volumeID)
	}
}
